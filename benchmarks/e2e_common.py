"""What both sides of `benchmarks/end_to_end.py` share: the workload, the clocks, the table.

The workload (`--env`): its environment, the task rows of every step (our training loop's own
schedule), the HF weights both sides start from, and our side's `python -m gspo_agents.train`
overrides. The measurement: wall and process-CPU marks per step, per-side summaries, pooling of
several runs, the markdown table. Nothing here trains, generates or judges.
"""

from __future__ import annotations

import functools
import json
import statistics
import time

from gspo_agents.tracking import BenchProgress

RESULT = "RESULT "
DEFAULT_MAX_NEW_TOKENS = {"arithmetic": 16, "codeforces": 128}
DEFAULT_SFT = {"arithmetic": False, "codeforces": True}  # the tiny model writes no code without
# At 1e-3 the cold-started code model drifts within 2-3 steps (one run: 42 -> 116 tokens per
# sample on one side while the other stayed near 43), so the rows would no longer do the same
# work per step; 1e-5 keeps the samples comparable over a benchmark's few steps.
DEFAULT_LR = {"arithmetic": 1e-3, "codeforces": 1e-5}


# --------------------------------------------------------------------------------------------
# the workload
# --------------------------------------------------------------------------------------------
def env_overrides(args) -> list[str]:
    """Hydra overrides that pick the environment (and, for code, the judge)."""
    if args.env == "arithmetic":
        return ["env=arithmetic", f"++env.kwargs.difficulty={args.difficulty}"]
    return [
        "env=codeforces",
        "sandbox=docker",
        f"sandbox.max_concurrency={args.sandbox_concurrency}",
        f"rollout.max_context_tokens={args.max_context_tokens}",
    ]


def our_overrides(args, run_dir: str, *, async_rollouts: bool = False) -> list[str]:
    """The `python -m gspo_agents.train` overrides of our side (also printed for reproduction).

    Async mode runs one more step, untimed: a run's last step has no next batch to generate
    during its update (the pipeline drains), just as its first has none ready (it fills)."""
    steps = args.warmup + args.steps + (1 if async_rollouts else 0)
    return [
        *env_overrides(args),
        "model=hf",
        f"model.path={args.model}",
        "engine=local",
        "algorithm=gspo",
        f"algorithm.filter_zero_spread_groups={str(args.filter_zero_spread).lower()}",
        "trainer.sft.enabled=false",
        f"trainer.steps={steps}",
        f"trainer.tasks_per_step={args.tasks_per_step}",
        f"trainer.num_minibatches={args.num_minibatches}",
        f"trainer.lr={args.lr}",
        f"trainer.seed={args.seed}",
        f"trainer.async_rollouts={str(async_rollouts).lower()}",
        # A benchmark measures the work of a step, not learning: a step whose groups have no
        # reward spread still generates, judges and updates (nothing is filtered), so the
        # run's stop after 3 such steps in a row (which cost every row of a run that had them)
        # is off here.
        "trainer.max_failed_steps=0",
        f"trainer.run_dir={run_dir}",
        f"rollout.num_samples_per_task={args.group_size}",
        f"rollout.max_new_tokens_per_turn={args.max_new_tokens}",
        "rollout.temperature=1.0",
        "logger=none",
    ]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from gspo_agents.config import CONFIG_DIR, register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose("config", overrides=overrides)


@functools.cache
def _env_spec(overrides: tuple[str, ...]) -> tuple[str, dict, int | None]:
    from omegaconf import OmegaConf

    env = compose(list(overrides)).env
    return env.name, OmegaConf.to_container(env.kwargs, resolve=True), env.max_train_tasks


def make_env(args, sandbox=None):
    """The workload's env, built from the same composed config (name and kwargs) as our run;
    a code env judges on `sandbox` (a shared `sandbox.Sandbox`)."""
    import envs

    name, kwargs, _ = _env_spec(tuple(env_overrides(args)))
    return envs.make(name, **kwargs, **({"sandbox": sandbox} if sandbox is not None else {}))


def step_tasks(args) -> list[list[dict]]:
    """The task rows of every step, exactly as our training loop picks them."""
    from gspo_agents.batching import tasks_for_step

    max_tasks = _env_spec(tuple(env_overrides(args)))[2]
    tasks = make_env(args).load_tasks("train")[: max_tasks or None]
    total = args.warmup + args.steps
    return [tasks_for_step(tasks, s, args.tasks_per_step, args.seed) for s in range(total)]


def resolve_model(args) -> str:
    """The tiny model's HF directory, or its cold start on the workload's env (cached by
    content, built once if not: the same weights `python -m gspo_agents.train env=...` uses)."""
    from gspo_agents.models import ModelConfig
    from gspo_agents.models import resolve_model as resolve

    if not args.sft:
        return resolve(ModelConfig(name="tiny"))
    from gspo_agents.components import resolve_start_model

    cfg = compose([*env_overrides(args), "model=tiny"])
    return resolve_start_model(cfg, make_env(args))


# --------------------------------------------------------------------------------------------
# measurement
# --------------------------------------------------------------------------------------------
def step_progress(args, side: str, steps: int) -> BenchProgress:
    """A worker's progress line, one tick per training step (untimed ones included); the
    parent passes these lines on from the worker's captured output."""
    return BenchProgress(f"{args.env}/{side}, training steps", steps)


class CpuClock:
    """(wall, process CPU) marks; CPU counts every thread of this process."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def mark(self) -> None:
        self.marks.append((time.perf_counter(), time.process_time()))

    def intervals(self, skip: int) -> list[tuple[float, float]]:
        m = self.marks
        return [(m[i][0] - m[i - 1][0], m[i][1] - m[i - 1][1]) for i in range(skip + 1, len(m))]


class JudgeCounter:
    """Counts `sandbox.Sandbox.run` calls and their seconds (summed over concurrent calls), the
    same way on both sides, so the table shows that the judge really ran."""

    def __init__(self) -> None:
        self.runs = 0
        self.seconds = 0.0

    def install(self) -> None:
        from sandbox import Sandbox

        original, counter = Sandbox.run, self

        async def run(self, *a, **k):
            started = time.perf_counter()
            try:
                return await original(self, *a, **k)
            finally:
                counter.runs += 1
                counter.seconds += time.perf_counter() - started

        Sandbox.run = run


def emit(row: dict) -> None:
    print(RESULT + json.dumps(row), flush=True)


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def summary(name, walls, cpus, *, rollout_s, update_s, completion_tokens, rewards, trained_seqs):
    if not walls:
        raise RuntimeError(f"{name}: no timed steps were recorded")
    return {
        "run": name,
        "timed_steps": len(walls),
        "step_wall_s": [round(w, 4) for w in walls],
        "step_cpu_s": [round(c, 4) for c in cpus],
        "s_per_step": mean(walls),
        "s_per_step_median": statistics.median(walls),
        "cpu_s_per_step": mean(cpus),
        "steps_per_min": 60.0 * len(walls) / sum(walls),
        "steps_per_cpu_min": 60.0 * len(cpus) / sum(cpus) if cpus and sum(cpus) else None,
        "rollout_s_per_step": mean(rollout_s),
        "update_s_per_step": mean(update_s) if update_s else None,
        "completion_tokens_per_step": mean(completion_tokens),
        "gen_tokens_per_s": sum(completion_tokens) / sum(rollout_s) if sum(rollout_s) else None,
        "reward_mean": mean(rewards),
        "trained_seqs_per_step": mean(trained_seqs),
    }


def combine(rows: list[dict]) -> dict:
    """Pool the timed steps of several runs of one side."""
    walls = [w for r in rows for w in r["step_wall_s"]]
    cpus = [c for r in rows for c in r["step_cpu_s"]]
    n = sum(r["timed_steps"] for r in rows)

    def pooled(key):
        pairs = [(r[key], r["timed_steps"]) for r in rows if r.get(key) is not None]
        return sum(v * k for v, k in pairs) / sum(k for _, k in pairs) if pairs else None

    tokens = pooled("completion_tokens_per_step")
    rollout = pooled("rollout_s_per_step")
    return {
        "run": rows[0]["run"],
        "kind": rows[0]["kind"],
        "runs": len(rows),
        "timed_steps": n,
        "steps_per_min": 60.0 * len(walls) / sum(walls),
        "s_per_step": sum(walls) / len(walls),
        "s_per_step_median": statistics.median(walls),
        "cpu_s_per_step": sum(cpus) / len(cpus),
        "steps_per_cpu_min": 60.0 * len(cpus) / sum(cpus),
        "rollout_s_per_step": rollout,
        "update_s_per_step": pooled("update_s_per_step"),
        "completion_tokens_per_step": tokens,
        "gen_tokens_per_s": tokens / rollout if tokens and rollout else None,
        "judge_runs_per_step": pooled("judge_runs_per_step"),
        "reward_mean": pooled("reward_mean"),
        "trained_seqs_per_step": pooled("trained_seqs_per_step"),
        "phases_s_per_step": _pooled_phases(rows),
        "load_avg_1m": [r["load_avg_1m_before"] for r in rows] + [rows[-1]["load_avg_1m_after"]],
    }


def _pooled_phases(rows: list[dict]) -> dict[str, float]:
    keys = {k for r in rows for k in r.get("phases_s_per_step", {})}
    n = sum(r["timed_steps"] for r in rows)
    return {
        k: sum(r.get("phases_s_per_step", {}).get(k, 0.0) * r["timed_steps"] for r in rows) / n
        for k in sorted(keys)
    }


def table(sides: list[dict], trl_steps_per_min: dict[str, float]) -> str:
    """One markdown table; `trl_steps_per_min` maps a workload to TRL's rate (the ratio column)."""

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    lines = [
        "| env | run | timed steps | steps/min (wall) | x TRL | s/step (wall, median) "
        "| CPU-s/step | rollout s/step | update s/step | gen tokens/s | completion tokens/step "
        "| judge runs/step | seqs trained/step | reward |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in sides:
        peer = trl_steps_per_min.get(s["env"])
        ratio = s["steps_per_min"] / peer if peer else None
        lines.append(
            f"| {s['env']} | {s['run']} | {s['timed_steps']} | {s['steps_per_min']:.1f} "
            f"| {f(ratio, '.2f')} | {s['s_per_step']:.2f} ({s['s_per_step_median']:.2f}) "
            f"| {s['cpu_s_per_step']:.2f} | {f(s['rollout_s_per_step'], '.2f')} "
            f"| {f(s['update_s_per_step'], '.2f')} | {f(s['gen_tokens_per_s'], '.0f')} "
            f"| {f(s['completion_tokens_per_step'], '.0f')} "
            f"| {f(s['judge_runs_per_step'], '.1f')} "
            f"| {f(s['trained_seqs_per_step'], '.0f')} | {f(s['reward_mean'], '.3f')} |"
        )
    return "\n".join(lines)


def phase_lines(sides: list[dict]) -> list[str]:
    """Where each side's step goes, seconds per timed step."""
    out = []
    for s in sides:
        phases = s.get("phases_s_per_step") or {}
        if phases:
            parts = ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
            out.append(f"  {s['env']} / {s['run']}: {parts}")
    return out
