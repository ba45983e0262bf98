"""Issue 35: `trainer.eval_every_steps` and `logger.tensorboard`, read back from what a real tiny
training wrote (metrics.jsonl, the console, the plots, TensorBoard's event files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tiny_run import TINY_RUN

ROOT = Path(__file__).resolve().parents[1]


def test_held_out_eval_and_tensorboard_during_training(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gspo_agents.train",
            *TINY_RUN,
            "trainer.steps=3",
            "trainer.eval_every_steps=2",
            "eval.k=3",
            "eval.max_tasks=4",
            "logger.tensorboard=true",
            "logger.wandb_mode=disabled",
            f"trainer.run_dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = {r["step"]: r for r in rows if "eval/pass@1" in r}
    assert sorted(evaluated) == [2, 3]  # every 2 steps, and after the last
    for row in evaluated.values():
        assert row["eval/k"] == 3 and row["eval/num_tasks"] + row["eval/errors"] > 0
        assert 0.0 <= row["eval/pass@1"] <= row["eval/pass@k"] <= 1.0
    assert "eval/pass@1" in proc.stderr  # on the console line of those steps

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "reward_mean" in tags and "eval/pass@k" in tags
    reward = [(e.step, e.value) for e in events.Scalars("reward_mean")]
    assert reward == [(r["step"], float(r["reward_mean"])) for r in rows]  # float32 of the same
    assert [e.step for e in events.Scalars("eval/pass@1")] == [2, 3]

    from gspo_agents.plot import plot_runs

    written = plot_runs([str(run_dir)], str(tmp_path / "plots"))
    assert str(tmp_path / "plots" / "eval.png") in written
