"""The paper's comparison in one command: GSPO against GRPO and GSPO-token, same seed and setup.

    python experiments/gspo_vs_grpo.py [--env arithmetic] [--steps 60] [--models tiny tiny-moe]
                                       [--algorithms gspo grpo gspo_token] [--out runs/compare]
                                       [-- extra overrides for every run]

Each (model, algorithm) pair is an ordinary `python -m gspo_agents.train` run in its own
directory. Then, per model, the runs are overlaid in PNGs (reward, clipped-token fraction, ratio
spread and, for MoE, expert-activation volatility) and a Markdown table of the measured numbers is
written next to them. The core package never imports this folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from gspo_agents.plot import plot_runs
from gspo_agents.tracking import read_metrics


def run_one(env: str, model: str, algorithm: str, steps: int, out: Path, extra: list[str]) -> Path:
    run_dir = out / f"{model}-{algorithm}"
    cmd = [
        sys.executable,
        "-m",
        "gspo_agents.train",
        f"env={env}",
        f"model={model}",
        f"algorithm={algorithm}",
        f"trainer.steps={steps}",
        f"trainer.run_dir={run_dir}",
        *extra,
    ]
    print(f"\n=== {model} / {algorithm}: {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, check=True)
    return run_dir


def summarize(run_dir: Path) -> dict[str, float]:
    rows = read_metrics(run_dir)
    tenth = max(1, len(rows) // 10)

    def mean(key: str, part: list[dict]) -> float | None:
        vals = [r[key] for r in part if isinstance(r.get(key), (int, float))]
        return sum(vals) / len(vals) if vals else None

    return {
        "reward_first_10pct": mean("reward_mean", rows[:tenth]),
        "reward_last_10pct": mean("reward_mean", rows[-tenth:]),
        "clip_frac_tokens": mean("clip_frac_tokens", rows),
        "ratio_max": mean("ratio_max", rows),
        "ratio_min": mean("ratio_min", rows),
        "expert_volatility": mean("expert_volatility", rows),
        "steps": len(rows),
    }


def markdown(summaries: dict[str, dict[str, float]]) -> str:
    cols = [
        "reward_first_10pct",
        "reward_last_10pct",
        "clip_frac_tokens",
        "ratio_min",
        "ratio_max",
        "expert_volatility",
    ]
    lines = ["| run | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, s in summaries.items():
        cells = ["-" if s[c] is None else f"{s[c]:.4g}" for c in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default="arithmetic")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--models", nargs="+", default=["tiny", "tiny-moe"])
    p.add_argument("--algorithms", nargs="+", default=["gspo", "grpo", "gspo_token"])
    p.add_argument("--out", default="runs/compare")
    args = p.parse_args(argv)
    out = Path(args.out)
    summaries: dict[str, dict[str, float]] = {}
    for model in args.models:
        dirs = [run_one(args.env, model, a, args.steps, out, extra) for a in args.algorithms]
        for path in plot_runs([str(d) for d in dirs], str(out / f"plots-{model}")):
            print(path)
        summaries.update({d.name: summarize(d) for d in dirs})
    (out / "summary.json").write_text(json.dumps(summaries, indent=2))
    table = markdown(summaries)
    (out / "summary.md").write_text(table + "\n")
    print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
