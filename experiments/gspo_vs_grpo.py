"""The paper's comparison, with seeds: every arm runs >= 3 seeds; tables and plots show mean ± spread.

    python experiments/gspo_vs_grpo.py [--steps 60] [--seeds 0 1 2] [--arms ARM ...] [--jobs 2]
                                       [--out runs/compare] [-- extra overrides for every run]

Arms (each an ordinary `python -m gspo_agents.train` run per seed, in OUT/ARM/seedS):
  dense-gspo, dense-gspo_token, dense-grpo       the dense tiny Qwen3 on Arithmetic-v0
  moe-gspo, moe-grpo, moe-grpo-rr                the tiny Qwen3-MoE; rr: GRPO with routing replay
  chain-gspo, chain-gspo_token                   ArithmeticChain-v0 (3 turns, per-turn rewards):
                                                 where GSPO-token's per-turn credit can differ
  mismatch-engine, mismatch-recompute, mismatch-tis
                                                 a bf16 engine against the fp32 trainer (CPU):
                                                 engine anchor, recomputed anchor, recompute + TIS
Groups of arms: --arms dense moe chain mismatch (or `all`, the default: the first three groups).

By default a seed seeds the whole run, cold start (SFT) included. `--shared-cold-start` runs each
(model, env) cold start once, with seed 0, and starts every seed's RL from it (`model=hf
model.path=...`): seeds then vary the RL phase only, and the cold starts cost one run, not three.
The chain arms then start from Arithmetic-v0's cold start (same questions, same answer format).

Per arm the table gives mean ± sample std over seeds of: reward over the first and last 10% of
steps, clipped-token fraction, clipped fraction of the first minibatch (before any update: what
staleness and numerics alone clip), the signed sequence-level engine-vs-trainer log-ratio, and for
MoE the paper's expert volatility. `ratio min / max` is a sequence ratio (geometric mean over the
tokens) for GSPO and GSPO-token but a per-token ratio for GRPO: the two are not comparable, and the
table says which is which. The core package never imports this folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gspo_agents.tracking import read_metrics


@dataclass(frozen=True)
class Arm:
    group: str
    overrides: tuple[str, ...]
    ratio_level: str  # what ratio_min / ratio_max describe


ARMS: dict[str, Arm] = {
    "dense-gspo": Arm("dense", ("model=tiny", "algorithm=gspo"), "sequence"),
    "dense-gspo_token": Arm("dense", ("model=tiny", "algorithm=gspo_token"), "sequence"),
    "dense-grpo": Arm("dense", ("model=tiny", "algorithm=grpo"), "token"),
    "moe-gspo": Arm("moe", ("model=tiny-moe", "algorithm=gspo"), "sequence"),
    "moe-grpo": Arm("moe", ("model=tiny-moe", "algorithm=grpo"), "token"),
    "moe-grpo-rr": Arm(
        "moe", ("model=tiny-moe", "algorithm=grpo", "algorithm.routing_replay=true"), "token"
    ),
    "chain-gspo": Arm(
        "chain", ("env=arithmetic_chain", "model=tiny", "algorithm=gspo"), "sequence"
    ),
    "chain-gspo_token": Arm(
        "chain", ("env=arithmetic_chain", "model=tiny", "algorithm=gspo_token"), "sequence"
    ),
    "mismatch-engine": Arm("mismatch", ("model=tiny", "engine.dtype=bfloat16"), "sequence"),
    "mismatch-recompute": Arm(
        "mismatch",
        ("model=tiny", "engine.dtype=bfloat16", "algorithm.old_logprobs=recompute"),
        "sequence",
    ),
    "mismatch-tis": Arm(
        "mismatch",
        (
            "model=tiny",
            "engine.dtype=bfloat16",
            "algorithm.old_logprobs=recompute",
            "algorithm.seq_is_cap=2.0",
        ),
        "sequence",
    ),
}
GROUPS = sorted({a.group for a in ARMS.values()})
DEFAULT_GROUPS = ("dense", "moe", "chain")

COLUMNS = {  # summary key -> (table header, metric, part of the run)
    "reward_first": ("reward, first 10%", "reward_mean", "first"),
    "reward_last": ("reward, last 10%", "reward_mean", "last"),
    "clip_frac_tokens": ("clipped tokens", "clip_frac_tokens", "all"),
    "clip_first_mb": ("clipped tokens, 1st minibatch", "clip_frac_tokens_first_mb", "all"),
    "logratio_mean": ("seq log-ratio trainer/engine", "engine_logratio_seq_mean", "all"),
    "logratio_std": ("its spread (std)", "engine_logratio_seq_std", "all"),
    "ratio_min": ("ratio min", "ratio_min", "all"),
    "ratio_max": ("ratio max", "ratio_max", "all"),
    "expert_volatility": ("expert volatility", "expert_volatility", "all"),
    "trained_seqs": ("trained seqs / step", "num_trained_seqs", "all"),
}
PLOTS = {
    "reward": ("reward_mean", "mean reward"),
    "clip_fraction": ("clip_frac_tokens", "clipped-token fraction"),
    "expert_volatility": ("expert_volatility", "expert volatility (changed experts / active)"),
    "engine_logratio": ("engine_logratio_seq_mean", "sequence log-ratio trainer / engine"),
}


def expand_arms(names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        if name == "all":
            out += [a for a, arm in ARMS.items() if arm.group in DEFAULT_GROUPS]
        elif name in GROUPS:
            out += [a for a, arm in ARMS.items() if arm.group == name]
        elif name in ARMS:
            out.append(name)
        else:
            raise SystemExit(f"unknown arm {name!r}; arms: {', '.join(ARMS)}; groups: {GROUPS}")
    return list(dict.fromkeys(out))


def command(
    arm: str, seed: int, steps: int, out: Path, extra: list[str], start: str | None = None
) -> list[str]:
    """The training command of one (arm, seed); `start`: a shared cold-started model directory."""
    overrides = list(ARMS[arm].overrides)
    if start is not None:
        overrides = [o for o in overrides if not o.startswith("model=")]
        overrides += ["model=hf", f"model.path={start}"]
    return [
        sys.executable,
        "-m",
        "gspo_agents.train",
        *overrides,
        f"trainer.steps={steps}",
        f"trainer.seed={seed}",
        f"trainer.run_dir={out / arm / f'seed{seed}'}",
        "logger.wandb_mode=disabled",
        *extra,
    ]


def cold_start(arm: str, extra: list[str]) -> str:
    """The seed-0 cold-started model of an arm's (model, env), trained once and cached."""
    from hydra import compose, initialize_config_dir

    import envs
    from gspo_agents.components import resolve_start_model
    from gspo_agents.config import CONFIG_DIR, register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[*start_key(arm), *extra])
    env = envs.make(cfg.env.name, **dict(cfg.env.kwargs))
    return resolve_start_model(cfg, env)


def start_key(arm: str) -> tuple[str, ...]:
    """The overrides that pick an arm's cold start. The chain arms share Arithmetic-v0's: its SFT
    teaches the answer format on the same questions (the chain's own SFT sees only turn 1)."""
    keep = ("model=",) if ARMS[arm].group == "chain" else ("model=", "env=")
    return tuple(o for o in ARMS[arm].overrides if o.startswith(keep))


def run_one(cmd: list[str], log_path: Path) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(vals) / len(vals) if vals else None


def summarize_run(run_dir: Path) -> dict[str, float | None]:
    rows = read_metrics(run_dir)
    tenth = max(1, len(rows) // 10)
    parts = {"first": rows[:tenth], "last": rows[-tenth:], "all": rows}
    out: dict[str, float | None] = {k: _mean(parts[p], m) for k, (_, m, p) in COLUMNS.items()}
    out["steps"] = float(len(rows))
    return out


def mean_spread(values: list[float | None]) -> tuple[float, float, int] | None:
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0, len(xs)


def summarize_arm(run_dirs: list[Path]) -> dict[str, tuple[float, float, int] | None]:
    per_seed = [summarize_run(d) for d in run_dirs]
    return {k: mean_spread([s[k] for s in per_seed]) for k in [*COLUMNS, "steps"]}


def markdown(summaries: dict[str, dict], seeds: int) -> str:
    cols = list(COLUMNS)
    head = ["arm", "ratio is", *(COLUMNS[c][0] for c in cols)]
    lines = [
        f"mean ± sample std over {seeds} seeds",
        "",
        "| " + " | ".join(head) + " |",
        "|---|---|" + "---:|" * len(cols),
    ]
    for arm, s in summaries.items():
        cells = []
        for c in cols:
            v = s.get(c)
            cells.append("–" if v is None else f"{v[0]:.3g} ± {v[1]:.2g}")
        lines.append(f"| {arm} | {ARMS[arm].ratio_level} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curves(run_dirs: list[Path], key: str) -> tuple[list[int], list[float], list[float]]:
    """Per step: mean and sample std over the seeds that logged `key` at that step."""
    by_step: dict[int, list[float]] = {}
    for d in run_dirs:
        for r in read_metrics(d):
            if isinstance(r.get(key), (int, float)):
                by_step.setdefault(int(r["step"]), []).append(float(r[key]))
    steps = sorted(by_step)
    means = [statistics.fmean(by_step[s]) for s in steps]
    stds = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
    return steps, means, stds


def smooth(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1) : i + 1]
        out.append(sum(part) / len(part))
    return out


def plot_group(runs: dict[str, list[Path]], out_dir: Path, window: int = 5) -> list[Path]:
    """One PNG per metric: each arm's mean over seeds with a ± 1 std band (moving mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (key, title) in PLOTS.items():
        data = {arm: curves(dirs, key) for arm, dirs in runs.items()}
        if not any(steps for steps, _, _ in data.values()):
            continue
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for arm, (steps, means, stds) in data.items():
            if not steps:
                continue
            m, s = smooth(means, window), smooth(stds, window)
            n = len(runs[arm])
            ax.plot(steps, m, label=f"{arm} ({n} seeds)")
            ax.fill_between(
                steps, [a - b for a, b in zip(m, s)], [a + b for a, b in zip(m, s)], alpha=0.2
            )
        ax.set_xlabel("step")
        ax.set_title(f"{title}: mean ± std over seeds (moving mean over {window})", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=["all"])
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each uses one process)")
    p.add_argument("--out", default="runs/compare")
    p.add_argument("--report-only", action="store_true", help="summarise existing runs")
    p.add_argument("--shared-cold-start", action="store_true", help="one SFT per (model, env)")
    args = p.parse_args(argv)
    if len(args.seeds) < 3 and not args.report_only:
        print(f"warning: {len(args.seeds)} seed(s); spreads need >= 3", file=sys.stderr)
    arms, out = expand_arms(args.arms), Path(args.out)
    started = time.perf_counter()
    if not args.report_only:
        starts: dict[tuple[str, ...], str] = {}
        if args.shared_cold_start:
            for a in arms:
                if start_key(a) not in starts:
                    starts[start_key(a)] = cold_start(a, extra)
        jobs = [(a, s) for s in args.seeds for a in arms]  # seed-major: early seeds finish first
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {
                (a, s): pool.submit(
                    run_one,
                    command(a, s, args.steps, out, extra, starts.get(start_key(a))),
                    out / a / f"seed{s}.log",
                )
                for a, s in jobs
            }
            failed = [f"{a}/seed{s}" for (a, s), f in futures.items() if f.result() != 0]
        if failed:
            print(f"failed runs (see their .log): {failed}", file=sys.stderr)
    runs = {
        a: [
            out / a / f"seed{s}"
            for s in args.seeds
            if (out / a / f"seed{s}" / "metrics.jsonl").exists()
        ]
        for a in arms
    }
    runs = {a: dirs for a, dirs in runs.items() if dirs}
    summaries = {a: summarize_arm(dirs) for a, dirs in runs.items()}
    for group in GROUPS:
        members = {a: d for a, d in runs.items() if ARMS[a].group == group}
        if members:
            for path in plot_group(members, out / f"plots-{group}"):
                print(path)
    elapsed = time.perf_counter() - started
    (out / "summary.json").write_text(
        json.dumps(
            {
                "seeds": args.seeds,
                "steps": args.steps,
                "wall_s": elapsed,
                "overrides": extra,
                "arms": summaries,
            },
            indent=2,
        )
    )
    table = markdown(summaries, len(args.seeds))
    (out / "summary.md").write_text(table + "\n")
    print("\n" + table + f"\n\nwall time {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
