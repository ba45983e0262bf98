"""End to end: whole GSPO training steps per minute, ours against TRL's GRPOTrainer, one table.

    python benchmarks/end_to_end.py                       # a few minutes on 2 CPU cores
    python benchmarks/end_to_end.py --steps 10 --rounds 2 --json e2e.json
    pip install -e '.[bench]'                             # TRL is optional, only for its row

What a "training step" is, for both sides (the unit of the table):
    one rollout batch of T tasks x G samples (generation + the \\boxed{} reward of each sample)
    followed by its `num_minibatches` (4) optimizer steps over those T*G sequences.
- ours: one iteration of `gspo_agents.train.training_loop` (collect -> advantages -> 4 minibatch
  updates -> export_hf + engine weight reload -> log), run by `gspo_agents.train.run(cfg)` on the
  config `python -m gspo_agents.train` composes from the overrides printed below (env=arithmetic,
  GSPO, the LocalEngine, cold-start SFT off, logger=none).
- TRL: one generation cycle of GRPOTrainer = `steps_per_generation` (4) of its optimizer steps,
  per_device_train_batch_size T*G/4, gradient_accumulation_steps 1, so each cycle generates T*G
  completions once and makes 4 updates (GSPO settings: importance_sampling_level="sequence",
  loss_type="grpo", epsilon 3e-4, epsilon_high 4e-4, beta 0; plain HF generate on CPU, no vLLM).

Same work: the same HF weights (the project's `tiny` model; `--sft` uses its cached cold start),
the same tasks in the same order per step (TRL's dataset is our `tasks_for_step` schedule with
shuffling off), the same chat-template prompts (TRL renders the same messages with the same
tokenizer), G, max completion length, temperature 1, lr, grad clip. Rewards come from
`envs.arithmetic.ArithmeticEnv.step` on both sides. Ours trains on every group
(`algorithm.filter_zero_spread_groups=false`) because TRL does; `--filter-zero-spread` shows our
default, which skips groups without signal (less work, so not the like-for-like row).

Timing: a step's wall time is the interval between the completions of consecutive steps (ours:
differences of `time_s` in the run's metrics.jsonl; TRL: a callback's clock at the last optimizer
step of each cycle), so everything in the loop counts. The first `--warmup` steps, model loading
and all other one-time setup are excluded. CPU-s per step is the worker process's CPU time over
the same intervals (all its threads); on a shared machine it is less sensitive to other people's
jobs than the wall clock. "rollout" is ours `rollout/wall_s` (generate + env.step) and TRL's
`_generate` + `_calculate_rewards`; generation tokens/s = completion tokens / rollout seconds.

Threads: by default each worker keeps torch's thread count. On a machine other jobs share, a
multi-threaded OpenMP forward stalls whenever one of its threads is descheduled, so TRL's steps
swing from ~0.6 s to ~20 s at random and its mean says more about the neighbours than about TRL;
there, compare with `--threads 1` (both sides single-threaded: like for like) and the CPU-s
columns, and look at the median. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULT = "RESULT "


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", choices=["ours", "trl"], default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)  # resolved by the parent
    p.add_argument("--steps", type=int, default=5, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=1, help="ours/TRL pairs, order alternating")
    p.add_argument("--tasks-per-step", type=int, default=8, help="T")
    p.add_argument("--group-size", type=int, default=8, help="G, samples per task")
    p.add_argument("--max-new-tokens", type=int, default=16, help="completion length limit")
    p.add_argument("--num-minibatches", type=int, default=4, help="optimizer steps per step")
    p.add_argument("--difficulty", type=int, default=2, help="arithmetic env difficulty")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads per worker (default: torch's)"
    )
    p.add_argument("--sft", action="store_true", help="both start from our cached cold start")
    p.add_argument("--filter-zero-spread", action="store_true", help="ours skips flat groups")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if (args.tasks_per_step * args.group_size) % args.num_minibatches:
        p.error("tasks-per-step x group-size must be divisible by num-minibatches (TRL needs it)")
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return args


# --------------------------------------------------------------------------------------------
# the shared work: config, tasks, reward
# --------------------------------------------------------------------------------------------
def our_overrides(args, run_dir: str) -> list[str]:
    """The `python -m gspo_agents.train` overrides of our side (also printed for reproduction)."""
    return [
        "env=arithmetic",
        f"++env.kwargs.difficulty={args.difficulty}",
        "model=hf",
        f"model.path={args.model}",
        "engine=local",
        "algorithm=gspo",
        f"algorithm.filter_zero_spread_groups={str(args.filter_zero_spread).lower()}",
        "trainer.sft.enabled=false",
        f"trainer.steps={args.warmup + args.steps}",
        f"trainer.tasks_per_step={args.tasks_per_step}",
        f"trainer.num_minibatches={args.num_minibatches}",
        f"trainer.lr={args.lr}",
        f"trainer.seed={args.seed}",
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


def make_env(args):
    from envs.arithmetic import ArithmeticEnv

    return ArithmeticEnv(difficulty=args.difficulty)


def step_tasks(args) -> list[list[dict]]:
    """The task rows of every step, exactly as our training loop picks them."""
    from gspo_agents.batching import tasks_for_step

    tasks = make_env(args).load_tasks("train")
    total = args.warmup + args.steps
    return [tasks_for_step(tasks, s, args.tasks_per_step, args.seed) for s in range(total)]


def resolve_model(args) -> str:
    """The tiny model's HF directory, or its cold start (cached by content; built once if not)."""
    from gspo_agents.models import ModelConfig
    from gspo_agents.models import resolve_model as resolve

    if not args.sft:
        return resolve(ModelConfig(name="tiny"))
    from gspo_agents.train import resolve_start_model

    cfg = compose(["env=arithmetic", f"++env.kwargs.difficulty={args.difficulty}", "model=tiny"])
    return resolve_start_model(cfg, make_env(args))


class CpuClock:
    """(wall, process CPU) marks; CPU counts every thread of this process."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def mark(self) -> None:
        self.marks.append((time.perf_counter(), time.process_time()))

    def intervals(self, skip: int) -> list[tuple[float, float]]:
        m = self.marks
        return [(m[i][0] - m[i - 1][0], m[i][1] - m[i - 1][1]) for i in range(skip + 1, len(m))]


def emit(row: dict) -> None:
    print(RESULT + json.dumps(row), flush=True)


# --------------------------------------------------------------------------------------------
# workers (each in its own process: fresh threads, no shared caches)
# --------------------------------------------------------------------------------------------
def worker_ours(args) -> None:
    from gspo_agents import train
    from gspo_agents.tracking import RunTracker, read_metrics

    train.quiet_libraries()
    run_dir = tempfile.mkdtemp(prefix="e2e-ours-")
    cfg = compose(our_overrides(args, run_dir))
    clock = CpuClock()
    log = RunTracker.log

    def timed_log(self, step, metrics):  # CPU marks at the same point time_s is taken
        clock.mark()
        return log(self, step, metrics)

    RunTracker.log = timed_log
    clock.mark()  # the run's start: only used if --warmup 0
    train.run(cfg)
    rows = read_metrics(run_dir)
    times = [0.0] + [r["time_s"] for r in rows]  # time_s counts from the tracker's start
    timed = rows[args.warmup :]
    walls = [times[i + 1] - times[i] for i in range(args.warmup, len(rows))]
    cpus = [c for _, c in clock.intervals(args.warmup)]
    tokens = [r["rollout/response_tokens_mean"] * r["rollout/trajectories"] for r in timed]
    emit(
        _summary(
            "ours: gspo_agents.train (GSPO, LocalEngine)",
            walls,
            cpus,
            rollout_s=[r["rollout/wall_s"] for r in timed],
            update_s=[r.get("update_time_s", 0.0) for r in timed],
            completion_tokens=tokens,
            rewards=[r.get("reward_mean", 0.0) for r in timed],
            trained_seqs=[r.get("num_trained_seqs", 0.0) for r in timed],
        )
        | {"step_time_s_mean": _mean([r["step_time_s"] for r in timed]), "run_dir": run_dir}
    )


def worker_trl(args) -> None:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    env = make_env(args)
    schedule = [task for tasks in step_tasks(args) for task in tasks]
    data = Dataset.from_dict(
        {
            "prompt": [env.reset(options={"task": t})[0] for t in schedule],  # chat messages
            "expr": [t["expr"] for t in schedule],
            "answer": [int(t["answer"]) for t in schedule],
        }
    )

    batch_rewards: list[float] = []  # mean reward of each cycle (called once per generation)

    def arithmetic_reward(completions, expr, answer, **_):
        """envs.arithmetic's own judgement of each completion."""
        out = []
        for completion, e, a in zip(completions, expr, answer):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            env.reset(options={"task": {"expr": e, "answer": a}})
            out.append(env.step(text)[1])
        batch_rewards.append(_mean(out))
        return out

    n = args.num_minibatches
    cycles = args.warmup + args.steps
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="e2e-trl-"),
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        per_device_train_batch_size=args.tasks_per_step * args.group_size // n,
        gradient_accumulation_steps=1,
        steps_per_generation=n,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        importance_sampling_level="sequence",
        loss_type="grpo",
        epsilon=3e-4,
        epsilon_high=4e-4,
        beta=0.0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=cycles * n,
        shuffle_dataset=False,  # our task order, step by step
        dataloader_num_workers=0,
        gradient_checkpointing=False,  # ours recomputes nothing either
        seed=args.seed,
    )
    clock, rollout = CpuClock(), {"s": [0.0] * cycles, "tokens": [0] * cycles}

    class CycleClock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            clock.mark()

        def on_step_end(self, a, state, *_, **k):
            if state.global_step % n == 0:  # the last optimizer step of a generation cycle
                clock.mark()

    class TimedGRPO(GRPOTrainer):
        def _cycle(self) -> int:
            return min(self.state.global_step // n, cycles - 1)

        def _generate(self, prompts):
            started = time.perf_counter()
            out = super()._generate(prompts)
            rollout["s"][self._cycle()] += time.perf_counter() - started
            rollout["tokens"][self._cycle()] += sum(len(ids) for ids in out[1])
            return out

        def _calculate_rewards(self, *a, **k):
            started = time.perf_counter()
            out = super()._calculate_rewards(*a, **k)
            rollout["s"][self._cycle()] += time.perf_counter() - started
            return out

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    trainer = TimedGRPO(
        model=model,
        reward_funcs=arithmetic_reward,
        args=config,
        train_dataset=data,
        processing_class=tok,
        callbacks=[CycleClock()],
    )
    trainer.train()
    intervals = clock.intervals(args.warmup)
    emit(
        _summary(
            f"TRL {trl.__version__} GRPOTrainer (seq-level, HF generate)",
            [w for w, _ in intervals],
            [c for _, c in intervals],
            rollout_s=rollout["s"][args.warmup :],
            update_s=[],
            completion_tokens=rollout["tokens"][args.warmup :],
            rewards=batch_rewards[args.warmup :],
            trained_seqs=[float(args.tasks_per_step * args.group_size)] * args.steps,
        )
    )


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _summary(name, walls, cpus, *, rollout_s, update_s, completion_tokens, rewards, trained_seqs):
    if not walls:
        raise RuntimeError(f"{name}: no timed steps were recorded")
    return {
        "run": name,
        "timed_steps": len(walls),
        "step_wall_s": [round(w, 4) for w in walls],
        "step_cpu_s": [round(c, 4) for c in cpus],
        "s_per_step": _mean(walls),
        "s_per_step_median": statistics.median(walls),
        "cpu_s_per_step": _mean(cpus),
        "steps_per_min": 60.0 * len(walls) / sum(walls),
        "steps_per_cpu_min": 60.0 * len(cpus) / sum(cpus) if cpus and sum(cpus) else None,
        "rollout_s_per_step": _mean(rollout_s),
        "update_s_per_step": _mean(update_s) if update_s else None,
        "completion_tokens_per_step": _mean(completion_tokens),
        "gen_tokens_per_s": sum(completion_tokens) / sum(rollout_s) if sum(rollout_s) else None,
        "reward_mean": _mean(rewards),
        "trained_seqs_per_step": _mean(trained_seqs),
    }


# --------------------------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------------------------
def _worker_flags(args) -> list[str]:
    flags = [
        "--model", args.model, "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--tasks-per-step", str(args.tasks_per_step), "--group-size", str(args.group_size),
        "--max-new-tokens", str(args.max_new_tokens),
        "--num-minibatches", str(args.num_minibatches), "--difficulty", str(args.difficulty),
        "--lr", str(args.lr), "--seed", str(args.seed), "--threads", str(args.threads or 0),
    ]  # fmt: skip
    return flags + (["--filter-zero-spread"] if args.filter_zero_spread else [])


def run_worker(kind: str, args) -> dict | None:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):  # one process each, never torchrun's
        env.pop(key, None)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    cmd = [sys.executable, __file__, "--worker", kind, *_worker_flags(args)]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            row = json.loads(line[len(RESULT) :])
            row.update(
                kind=kind,
                load_avg_1m_before=round(load_before, 2),
                load_avg_1m_after=round(os.getloadavg()[0], 2),
                process_wall_s=round(time.perf_counter() - started, 1),
            )
            return row
    print(f"[{kind}] failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}", file=sys.stderr)
    return None


def combine(rows: list[dict]) -> dict:
    """Pool the timed steps of several runs of one side."""
    walls = [w for r in rows for w in r["step_wall_s"]]
    cpus = [c for r in rows for c in r["step_cpu_s"]]
    n = sum(r["timed_steps"] for r in rows)

    def pooled(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return sum(v * r["timed_steps"] for v, r in zip(vals, rows)) / n if vals else None

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
        "completion_tokens_per_step": tokens,
        "gen_tokens_per_s": tokens / rollout if tokens and rollout else None,
        "reward_mean": pooled("reward_mean"),
        "trained_seqs_per_step": pooled("trained_seqs_per_step"),
        "load_avg_1m": [r["load_avg_1m_before"] for r in rows] + [rows[-1]["load_avg_1m_after"]],
    }


def table(sides: list[dict]) -> str:
    def f(x, spec):
        return "-" if x is None else format(x, spec)

    lines = [
        "| run | timed steps | steps/min (wall) | s/step (wall, median) | CPU-s/step "
        "| steps per CPU-min | rollout s/step | gen tokens/s | completion tokens/step "
        "| seqs trained/step | reward |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in sides:
        lines.append(
            f"| {s['run']} | {s['timed_steps']} | {s['steps_per_min']:.1f} "
            f"| {s['s_per_step']:.2f} ({s['s_per_step_median']:.2f}) | {s['cpu_s_per_step']:.2f} "
            f"| {s['steps_per_cpu_min']:.1f} | {f(s['rollout_s_per_step'], '.2f')} "
            f"| {f(s['gen_tokens_per_s'], '.0f')} | {f(s['completion_tokens_per_step'], '.0f')} "
            f"| {f(s['trained_seqs_per_step'], '.0f')} | {f(s['reward_mean'], '.3f')} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        {"ours": worker_ours, "trl": worker_trl}[args.worker](args)
        return
    args.model = resolve_model(args)  # one-time setup, outside every timed interval
    kinds = ["ours"]
    if not args.skip_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            print("TRL not installed (pip install -e '.[bench]'); ours only", file=sys.stderr)
        else:
            kinds.append("trl")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:  # alternate who goes first
            print(f"round {r + 1}/{args.rounds}: {kind} ...", file=sys.stderr, flush=True)
            row = run_worker(kind, args)
            if row is not None:
                runs[kind].append(row)
    sides = [combine(rows) for rows in runs.values() if rows]
    ours = next((s for s in sides if s["kind"] == "ours"), None)
    peer = next((s for s in sides if s["kind"] == "trl"), None)
    cmd = "python -m gspo_agents.train " + " ".join(our_overrides(args, "RUN_DIR"))
    print(f"\nours, the same run by hand: {cmd}")
    print(
        f"model: {args.model}  T={args.tasks_per_step} G={args.group_size} "
        f"max_new_tokens={args.max_new_tokens} minibatches/step={args.num_minibatches}  "
        f"torch threads/worker: {args.threads or 'default'}  cores: {os.cpu_count()}  "
        "load average (1m) around each run: "
        + ", ".join(f"{s['kind']} {s['load_avg_1m']}" for s in sides)
    )
    busiest = max((x for s in sides for x in s["load_avg_1m"]), default=0.0)
    if busiest > 0.5 * (os.cpu_count() or 1) and not args.threads:
        print(
            f"warning: load average {busiest:.1f} on {os.cpu_count()} cores. Multi-threaded "
            "OpenMP (TRL's forwards, our learner) slows down many-fold when other jobs hold the "
            "cores, and by different amounts per run; compare with --threads 1 and the CPU-s "
            "columns, or rerun on a quiet machine."
        )
    print(table(sides))
    ratio = None
    if ours and peer:
        ratio = {
            "steps_per_min": ours["steps_per_min"] / peer["steps_per_min"],
            "steps_per_cpu_min": ours["steps_per_cpu_min"] / peer["steps_per_cpu_min"],
        }
        print(
            f"ours / TRL: {ratio['steps_per_min']:.2f}x steps per minute (wall), "
            f"{ratio['steps_per_cpu_min']:.2f}x steps per CPU-minute"
        )
    if args.json:
        out = {"args": vars(args), "sides": sides, "runs": runs, "ratio_ours_over_trl": ratio}
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
