"""`python -m gspo_agents.plot RUN_DIR [RUN_DIR ...] [--out DIR]`: PNG curves from metrics.jsonl.

One figure per metric family (reward, clipped-token fraction, ratio spread; expert volatility and
tool-call statistics only when the run logged them); several run directories are overlaid,
labelled by their directory name. Titles wrap to fit the figure.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from gspo_agents.tracking import read_metrics

PANELS = {
    "reward": (["reward_mean"], "mean reward"),
    "clip_fraction": (["clip_frac_tokens"], "clipped-token fraction"),
    "ratio_spread": (["ratio_max", "ratio_min"], "importance ratio max / min"),
    "expert_volatility": (["expert_volatility"], "expert-activation volatility"),
    "loss": (["loss"], "policy loss"),
    "eval": (  # trainer.eval_every_steps only
        ["eval/pass@1", "eval/pass@k"],
        "held-out pass@1 and pass@k (eval.k samples per task)",
    ),
    "tool_calls": (  # tool envs only
        # tool_calls first: it is there whenever the env has tools (parse_ok_frac only when
        # some episode attempted a call)
        ["rollout/env/tool_calls", "rollout/env/parse_ok_frac", "rollout/num_turns_mean"],
        "tool calls, parse rate and turns per episode",
    ),
}


def smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def plot_runs(run_dirs: list[str], out_dir: str, window: int = 5) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {Path(d).name: read_metrics(d) for d in run_dirs}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    written = []
    for name, (keys, title) in PANELS.items():
        if not any(keys[0] in row for rows in runs.values() for row in rows):
            continue  # a panel is drawn for runs that logged its first key (tool envs: calls)
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for label, rows in runs.items():
            for key in keys:
                pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
                if pts:
                    steps, vals = zip(*pts)
                    suffix = f" {key}" if len(keys) > 1 else ""
                    ax.plot(steps, smooth(list(vals), window), label=f"{label}{suffix}")
        ax.set_xlabel("step")
        note = f"\n(moving mean over {window} steps)" if window > 1 else ""
        ax.set_title("\n".join(textwrap.wrap(title, 48)) + note, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = str(Path(out_dir) / f"{name}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gspo_agents.plot", description=__doc__)
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--out", default=None, help="output folder (default: RUN_DIR/plots)")
    parser.add_argument("--window", type=int, default=5, help="moving-mean window in steps")
    args = parser.parse_args(argv)
    out = args.out or str(Path(args.run_dirs[0]) / "plots")
    for path in plot_runs(args.run_dirs, out, args.window):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
