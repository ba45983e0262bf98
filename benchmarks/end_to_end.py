"""End to end: whole GSPO training steps per minute, ours (sync and async) against TRL's
GRPOTrainer, on two workloads, one table.

    python benchmarks/end_to_end.py --threads 1                   # both workloads, all three rows
    python benchmarks/end_to_end.py --env arithmetic --rounds 2 --steps 5 --json e2e.json
    python benchmarks/end_to_end.py --env codeforces --steps 4    # needs Docker (the judge)
    pip install -e '.[bench]'                                     # TRL is optional, only its row

Workloads (`--env`):
- arithmetic: `envs.arithmetic` (difficulty 2), 16 new tokens; reward = `ArithmeticEnv.step`.
- codeforces: the product's headline use, generation + judging + update. Codeforces-v0 training
  tasks (`envs/codeforces`, single turn), 128 new tokens, lr 1e-5 (at 1e-3 the samples drift
  within a few steps, so the rows would stop doing the same work), from the cached cold-start SFT
  weights for codeforces (`gspo_agents.sft.ensure_cold_start`, the weights
  `python -m gspo_agents.train env=codeforces` starts from; built once if missing; `--no-sft`
  for the raw tiny model, which writes no code and so is never judged). Reward = the sandbox's
  verdict via `CodeforcesEnv.astep` on a `sandbox.Sandbox` with the docker backend and
  max_concurrency `--sandbox-concurrency` (4, our default), on both sides.

What a "training step" is, for every row (the unit of the table):
    one rollout batch of T tasks x G samples (generation + the reward of each sample)
    followed by its `num_minibatches` (4) optimizer steps over those T*G sequences.
- ours, sync: one iteration of `gspo_agents.train.training_loop` (collect -> advantages -> 4
  minibatch updates -> export_hf + engine weight reload -> log), run by `gspo_agents.train.run`
  on the config `python -m gspo_agents.train` composes from the overrides printed below
  (GSPO, the LocalEngine, logger=none). Judging runs inside the rollout manager: each sample is
  judged as soon as its own generation ends, while the rest of the batch is still generating.
- ours, async: the same with `trainer.async_rollouts=true` (staleness 1): the batch of step k+1
  is generated and judged while step k trains; its in-flight turns are paused for the weight
  reload and finish under the new weights (per-token versions; the GSPO ratio uses the engine's
  log-probs). Its `overlap` line shows the engine's forward steps and CPU during the updates.
  It runs one extra, untimed step at the end: a run's last step has nothing to generate
  beside its update (the pipeline drains), as its first (warmup) has nothing ready (it fills).
- TRL: one generation cycle of GRPOTrainer = `steps_per_generation` (4) of its optimizer steps,
  per_device_train_batch_size T*G/4, gradient_accumulation_steps 1, so each cycle generates T*G
  completions once and makes 4 updates (GSPO settings: importance_sampling_level="sequence",
  loss_type="grpo", epsilon 3e-4, epsilon_high 4e-4, beta 0; plain HF generate on CPU, no vLLM).
  For codeforces its reward function is async and judges the whole batch concurrently
  (asyncio.gather over `CodeforcesEnv.astep`) on the same kind of sandbox: the best a TRL user
  can do with our sandbox; TRL itself still judges only after the whole batch has generated and
  trains only after the whole batch is judged. See benchmarks/e2e_trl.py.

Same work: the same HF weights, the same tasks in the same order per step (TRL's dataset is our
`tasks_for_step` schedule with shuffling off), the same chat-template prompts (TRL renders the
same messages with the same tokenizer), G, max completion length, temperature 1, lr, grad clip,
the same reward code. Ours trains on every group (`algorithm.filter_zero_spread_groups=false`)
because TRL does; `--filter-zero-spread` shows our default, which skips groups without signal
(less work, so not the like-for-like row). Not the same: samples (different RNG streams, and
the policies drift apart), hence completion lengths and rewards; the table shows both per step.

Timing: a step's wall time is the interval between the completions of consecutive steps (ours:
differences of `time_s` in the run's metrics.jsonl; TRL: a callback's clock at the last optimizer
step of each cycle), so everything in the loop counts. The first `--warmup` steps, model loading
and all other one-time setup are excluded. CPU-s per step is the worker process's CPU time over
the same intervals (all its threads; Docker's judge processes are not in it). "rollout" is ours
`rollout/wall_s` (generate + env.step; in async mode it runs beside the update) and TRL's
`_generate` + `_calculate_rewards`; generation tokens/s = completion tokens / rollout seconds;
judge runs = `Sandbox.run` calls. Phase lines say where each step's wall time goes (ours: waiting
for the batch, update, export, weight reload, rest; TRL: generate, old-logprob forward, reward,
training forward+backward, optimizer and rest).

Threads: by default each worker keeps torch's thread count. On a machine other jobs share, a
multi-threaded OpenMP forward stalls whenever one of its threads is descheduled, so TRL's steps
swing from ~0.6 s to ~20 s at random and its mean says more about the neighbours than about TRL;
there, compare with `--threads 1` (every worker's torch threads: like for like; our LocalEngine's
worker thread always uses one) and the CPU-s columns, and look at the median. Not part of the
test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from e2e_common import (
    DEFAULT_LR,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_SFT,
    RESULT,
    combine,
    our_overrides,
    phase_lines,
    resolve_model,
    table,
)

from gspo_agents.tracking import BENCH_PROGRESS_LINE, BenchProgress

REPO = Path(__file__).resolve().parent.parent
ENVS = ("arithmetic", "codeforces")
KINDS = ("ours", "ours_async", "trl")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", choices=KINDS, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--model", default=None, help="HF directory both sides start from (default: per env)"
    )
    p.add_argument("--env", nargs="+", choices=ENVS, default=list(ENVS), help="workloads")
    p.add_argument("--runs", nargs="+", choices=KINDS, default=list(KINDS), help="rows")
    p.add_argument("--steps", type=int, default=5, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=1, help="runs of each row, order rotating")
    p.add_argument("--tasks-per-step", type=int, default=8, help="T")
    p.add_argument("--group-size", type=int, default=8, help="G, samples per task")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="completion length limit (default: arithmetic 16, codeforces 128)",
    )
    p.add_argument("--num-minibatches", type=int, default=4, help="optimizer steps per step")
    p.add_argument("--difficulty", type=int, default=2, help="arithmetic env difficulty")
    p.add_argument("--sandbox-concurrency", type=int, default=4, help="codeforces judge slots")
    p.add_argument("--max-context-tokens", type=int, default=1024, help="codeforces (ours)")
    p.add_argument(
        "--lr", type=float, default=None, help="both sides (default: arithmetic 1e-3, code 1e-5)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads per worker (default: torch's)"
    )
    p.add_argument(
        "--sft",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start from the env's cached cold start (default: codeforces yes, arithmetic no)",
    )
    p.add_argument("--filter-zero-spread", action="store_true", help="ours skips flat groups")
    p.add_argument("--skip-trl", action="store_true", help="same as leaving trl out of --runs")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if (args.tasks_per_step * args.group_size) % args.num_minibatches:
        p.error("tasks-per-step x group-size must be divisible by num-minibatches (TRL needs it)")
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    if args.worker and len(args.env) != 1:
        p.error("a worker runs exactly one --env")
    return args


def for_env(args, env: str) -> argparse.Namespace:
    """The arguments of one workload, its per-env defaults filled in."""
    out = argparse.Namespace(**vars(args))
    out.env = env
    if out.max_new_tokens is None:
        out.max_new_tokens = DEFAULT_MAX_NEW_TOKENS[env]
    if out.sft is None:
        out.sft = DEFAULT_SFT[env]
    if out.lr is None:
        out.lr = DEFAULT_LR[env]
    return out


# --------------------------------------------------------------------------------------------
# orchestration: every run in its own process (fresh threads, no shared caches)
# --------------------------------------------------------------------------------------------
def _worker_flags(args) -> list[str]:
    flags = [
        "--env", args.env, "--model", args.model, "--steps", str(args.steps),
        "--warmup", str(args.warmup), "--tasks-per-step", str(args.tasks_per_step),
        "--group-size", str(args.group_size), "--max-new-tokens", str(args.max_new_tokens),
        "--num-minibatches", str(args.num_minibatches), "--difficulty", str(args.difficulty),
        "--sandbox-concurrency", str(args.sandbox_concurrency),
        "--max-context-tokens", str(args.max_context_tokens),
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
    returncode, output = run_passing_progress(cmd, env)
    for line in output:
        if line.startswith(RESULT):
            row = json.loads(line[len(RESULT) :])
            row.update(
                kind=kind,
                env=args.env,
                load_avg_1m_before=round(load_before, 2),
                load_avg_1m_after=round(os.getloadavg()[0], 2),
                process_wall_s=round(time.perf_counter() - started, 1),
            )
            return row
    print(f"[{args.env}/{kind}] failed (exit {returncode}):\n" + "\n".join(output)[-4000:])
    return None


def run_passing_progress(cmd: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run a worker, its stderr merged into its stdout; pass its progress lines on to our
    stderr as they come (the rest is shown only if it fails). Returns (exit code, its lines)."""
    output = []
    with subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        for line in proc.stdout or ():
            output.append(line.rstrip("\n"))
            if BENCH_PROGRESS_LINE.match(output[-1]):
                print(output[-1], file=sys.stderr, flush=True)
    return proc.returncode, output


def wanted_kinds(args) -> list[str]:
    kinds = [k for k in KINDS if k in args.runs and not (k == "trl" and args.skip_trl)]
    if "trl" in kinds:
        try:
            import trl  # noqa: F401
        except ImportError:
            print("TRL not installed (pip install -e '.[bench]'); ours only", file=sys.stderr)
            kinds.remove("trl")
    return kinds


def run_env(
    args, kinds: list[str], progress: BenchProgress, failed: list[str]
) -> tuple[list[dict], dict[str, list[dict]]]:
    args.model = args.model or resolve_model(args)  # one-time setup, outside timed intervals
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]  # rotate who goes first
        for kind in order:
            print(f"{args.env} round {r + 1}/{args.rounds}: {kind} ...", file=sys.stderr)
            row = run_worker(kind, args)
            if row is not None:
                runs[kind].append(row)
            else:
                failed.append(f"{args.env}/{kind} round {r + 1}")
            progress.tick()
    sides = []
    for rows in runs.values():
        if rows:
            side = combine(rows)
            side["env"] = args.env
            side["overlap"] = [r["overlap"] for r in rows if "overlap" in r]
            sides.append(side)
    return sides, runs


def report(args, per_env: dict[str, argparse.Namespace], sides: list[dict]) -> dict:
    for env, a in per_env.items():
        print(
            f"\n{env}, ours by hand: python -m gspo_agents.train "
            + " ".join(our_overrides(a, "RUN_DIR"))
        )
        print(f"{env}, async row: the same with trainer.async_rollouts=true and 1 more step")
        print(
            f"{env}: model {a.model}  T={a.tasks_per_step} G={a.group_size} "
            f"max_new_tokens={a.max_new_tokens} minibatches/step={a.num_minibatches}"
        )
    print(
        f"torch threads/worker: {args.threads or 'default'}  cores: {os.cpu_count()}  "
        "load average (1m) around each run: "
        + ", ".join(f"{s['env']}/{s['kind']} {s['load_avg_1m']}" for s in sides)
    )
    busiest = max((x for s in sides for x in s["load_avg_1m"]), default=0.0)
    if busiest > 0.5 * (os.cpu_count() or 1):
        print(
            f"warning: load average {busiest:.1f} on {os.cpu_count()} cores: other jobs share "
            "the CPU, wall-clock numbers are noisy; compare CPU-s and medians, or rerun quietly."
        )
    trl = {s["env"]: s["steps_per_min"] for s in sides if s["kind"] == "trl"}
    print(table(sides, trl))
    print("seconds per step by phase:")
    print("\n".join(phase_lines(sides)))
    for s in sides:
        for o in s.get("overlap", []):
            print(f"  overlap during updates, {s['env']}/{s['kind']}: {json.dumps(o)}")
    return {
        f"{s['env']}/{s['kind']}": s["steps_per_min"] / trl[s["env"]]
        for s in sides
        if s["env"] in trl
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        run_one_worker(for_env(args, args.env[0]))
        return
    kinds = wanted_kinds(args)
    per_env = {env: for_env(args, env) for env in args.env}
    sides, runs, failed = [], {}, []
    progress = BenchProgress("end_to_end, runs", len(per_env) * args.rounds * len(kinds))
    for env, a in per_env.items():
        env_sides, env_runs = run_env(a, kinds, progress, failed)
        sides += env_sides
        runs[env] = env_runs
    ratios = report(args, per_env, sides)
    if args.json:
        out = {
            "args": {e: vars(a) for e, a in per_env.items()},
            "sides": sides,
            "runs": runs,
            "ratio_steps_per_min_over_trl": ratios,
        }
        Path(args.json).write_text(json.dumps(out, indent=2))
    if failed:  # a row missing from the table is a failed benchmark, not a shorter table
        sys.exit(f"error: {len(failed)} run(s) failed (output above): {', '.join(failed)}")


def run_one_worker(args) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.worker == "trl":
        from e2e_trl import worker_trl

        worker_trl(args)
    else:
        from e2e_ours import worker_ours

        worker_ours(args, async_rollouts=args.worker == "ours_async")


if __name__ == "__main__":
    main()
