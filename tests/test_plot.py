"""The plotter draws the panels a run has data for, with titles inside the figure."""

from __future__ import annotations

import json
from pathlib import Path

from gspo_agents.plot import PANELS, plot_runs


def write_run(run_dir: Path, tools: bool) -> None:
    run_dir.mkdir()
    rows = []
    for step in range(1, 6):
        row = {"step": step, "reward_mean": step / 5, "loss": 0.1, "clip_frac_tokens": 0.01}
        row |= {"ratio_max": 1.01, "ratio_min": 0.99, "rollout/num_turns_mean": 1.0}
        if tools:
            row |= {"rollout/env/parse_ok_frac": 0.5, "rollout/env/tool_calls": 1.2}
            if step % 2 == 0:  # and a held-out evaluation every 2 steps
                row |= {"eval/pass@1": 0.2, "eval/pass@k": 0.5}
        rows.append(json.dumps(row))
    (run_dir / "metrics.jsonl").write_text("\n".join(rows) + "\n")


def test_no_tool_call_panel_for_a_run_without_tools(tmp_path):
    write_run(tmp_path / "plain", tools=False)
    names = {Path(p).stem for p in plot_runs([str(tmp_path / "plain")], str(tmp_path / "out"))}
    assert names == {"reward", "clip_fraction", "ratio_spread", "loss"}
    write_run(tmp_path / "agent", tools=True)
    names = {Path(p).stem for p in plot_runs([str(tmp_path / "agent")], str(tmp_path / "out2"))}
    assert "tool_calls" in names and "eval" in names


def test_the_tool_panel_is_drawn_when_no_episode_attempted_a_call(tmp_path):
    """parse_ok_frac is absent without attempts (issue 35); the calls (0) are still drawn."""
    run_dir = tmp_path / "silent"
    run_dir.mkdir()
    row = {"step": 1, "reward_mean": 0.0, "rollout/env/tool_calls": 0.0}
    (run_dir / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    names = {Path(p).stem for p in plot_runs([str(run_dir)], str(tmp_path / "out"))}
    assert "tool_calls" in names


def test_every_title_fits_inside_its_figure(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    checked = []
    real_savefig = plt.Figure.savefig

    def savefig(fig, *args, **kwargs):
        real_savefig(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        title = fig.axes[0].title
        box, frame = title.get_window_extent(renderer), fig.bbox
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1, title.get_text()
        checked.append(title.get_text())

    monkeypatch.setattr(plt.Figure, "savefig", savefig)
    write_run(tmp_path / "agent", tools=True)
    plot_runs([str(tmp_path / "agent")], str(tmp_path / "out"))
    assert len(checked) == len(PANELS) - 1  # all but expert volatility (a MoE metric)
