"""Our side of `benchmarks/end_to_end.py`: `gspo_agents.train.run` on the composed config.

The run itself is untouched; thin wrappers around a few of its methods record where each step's
time goes, without changing what runs:
- phases (seconds per step, in the training loop's own coroutine): waiting for the rollout batch
  (`collect` or `next_batch`), `learner.update`, `learner.export_hf`, `manager.update_weights`
  (engine pause + reload), and the rest (batching, logging).
- overlap (async mode's point): during every `learner.update`, how many forward steps the
  LocalEngine's worker thread made, how much CPU that thread used (from /proc), and how much CPU
  the learner's own thread used. Both nonzero = generation of step k+1 really runs while step k
  trains; the CPU of every other thread per update second > 1 would mean the learner uses more
  than one core.
"""

from __future__ import annotations

import functools
import inspect
import os
import tempfile
import time
from collections import defaultdict

from e2e_common import (
    CpuClock,
    JudgeCounter,
    compose,
    emit,
    mean,
    our_overrides,
    step_progress,
    summary,
)

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(native_id: int) -> float:
    """User + system CPU seconds of one thread of this process (Linux /proc)."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14, 15)


class Probe:
    """Per-step phase seconds and update-time overlap counters of one run."""

    def __init__(self) -> None:
        self.step = 0  # incremented by every tracker.log: the index of the step in progress
        self.phases: dict[str, list[float]] = defaultdict(list)
        self.engine = None
        self.during_update: list[dict[str, float]] = []

    def add(self, name: str, seconds: float) -> None:
        column = self.phases[name]
        column.extend([0.0] * (self.step + 1 - len(column)))
        column[self.step] += seconds

    def timed(self, name: str, method):
        probe = self
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def awrapper(*a, **k):
                started = time.perf_counter()
                try:
                    return await method(*a, **k)
                finally:
                    probe.add(name, time.perf_counter() - started)

            return awrapper

        @functools.wraps(method)
        def wrapper(*a, **k):
            started = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                probe.add(name, time.perf_counter() - started)

        return wrapper

    def watched_update(self, method):
        """learner.update, plus what the engine thread did while it ran (runs off the loop)."""
        probe = self

        @functools.wraps(method)
        def wrapper(*a, **k):
            engine = probe.engine
            tid = engine._worker.native_id if engine is not None else None
            before = (engine.stats.forward_steps, thread_cpu_s(tid)) if tid else (0, 0.0)
            wall, cpu, proc = time.perf_counter(), time.thread_time(), time.process_time()
            try:
                return method(*a, **k)
            finally:
                after = (engine.stats.forward_steps, thread_cpu_s(tid)) if tid else (0, 0.0)
                probe.during_update.append(
                    {
                        "step": probe.step,
                        "update_s": time.perf_counter() - wall,
                        "learner_thread_cpu_s": time.thread_time() - cpu,
                        "process_cpu_s": time.process_time() - proc,
                        "engine_forward_steps": after[0] - before[0],
                        "engine_thread_cpu_s": after[1] - before[1],
                    }
                )

        return wrapper


def install(
    probe: Probe, clock: CpuClock, judge: JudgeCounter, judge_runs: list[int], progress
) -> None:
    from gspo_agents import components
    from gspo_agents.learner_group import LearnerGroup
    from gspo_agents.rollout.manager import RolloutManager
    from gspo_agents.tracking import RunTracker

    log, build_engine = RunTracker.log, components.build_engine

    def timed_log(self, step, metrics):  # CPU marks at the same point time_s is taken
        clock.mark()
        judge_runs.append(judge.runs - sum(judge_runs))
        probe.step += 1
        progress.tick(step)
        return log(self, step, metrics)

    def capturing_build_engine(*a, **k):
        probe.engine = build_engine(*a, **k)
        return probe.engine

    RunTracker.log = timed_log
    components.build_engine = capturing_build_engine  # what build_driver calls
    RolloutManager.collect = probe.timed("rollout_wait", RolloutManager.collect)
    RolloutManager.next_batch = probe.timed("rollout_wait", RolloutManager.next_batch)
    RolloutManager.update_weights = probe.timed("weight_reload", RolloutManager.update_weights)
    LearnerGroup.update = probe.timed("update", probe.watched_update(LearnerGroup.update))
    LearnerGroup.export_hf = probe.timed("export_hf", LearnerGroup.export_hf)


def worker_ours(args, *, async_rollouts: bool) -> None:
    from gspo_agents import train
    from gspo_agents.tracking import read_metrics

    train.quiet_libraries()
    run_dir = tempfile.mkdtemp(prefix="e2e-ours-")
    cfg = compose(our_overrides(args, run_dir, async_rollouts=async_rollouts))
    clock, judge, judge_runs, probe = CpuClock(), JudgeCounter(), [], Probe()
    judge.install()
    side = "ours_async" if async_rollouts else "ours"
    install(probe, clock, judge, judge_runs, step_progress(args, side, cfg.trainer.steps))
    clock.mark()  # the run's start: only used if --warmup 0
    train.run(cfg)
    rows = read_metrics(run_dir)
    times = [0.0] + [r["time_s"] for r in rows]  # time_s counts from the tracker's start
    w = args.warmup
    timed = rows[w : w + args.steps]  # async mode's extra last step (the drain) is not timed
    walls = [times[i + 1] - times[i] for i in range(w, w + args.steps)]
    mode = "async rollouts, staleness 1" if async_rollouts else "sync"
    emit(
        summary(
            f"ours: gspo_agents.train (GSPO, LocalEngine, {mode})",
            walls,
            [c for _, c in clock.intervals(w)][: args.steps],
            rollout_s=[r["rollout/wall_s"] for r in timed],
            update_s=[r.get("update_time_s", 0.0) for r in timed],
            completion_tokens=[
                r["rollout/response_tokens_mean"] * r["rollout/trajectories"] for r in timed
            ],
            rewards=[r.get("reward_mean", 0.0) for r in timed],
            trained_seqs=[r.get("num_trained_seqs", 0.0) for r in timed],
        )
        | {
            "step_time_s_mean": mean(r["step_time_s"] for r in timed),
            "judge_runs_per_step": mean(judge_runs[w : w + args.steps]),
            "phases_s_per_step": our_phases(probe, walls, w),
            "overlap": overlap_summary(probe, w, args.steps),
            "staleness_mean": mean(r.get("rollout/staleness_mean", 0.0) for r in timed),
            "aborted_generations_per_step": mean(
                r.get("rollout/aborted_generations", 0.0) for r in timed
            ),
            "dropped_stale": sum(r.get("rollout/dropped_stale", 0.0) for r in timed),
            "run_dir": run_dir,
        }
    )


def our_phases(probe: Probe, walls: list[float], warmup: int) -> dict[str, float]:
    names = ("rollout_wait", "update", "export_hf", "weight_reload")
    n = len(walls)
    out = {k: sum(probe.phases.get(k, [])[warmup : warmup + n]) / n for k in names}
    out["rest"] = mean(walls) - sum(out.values())
    return out


def overlap_summary(probe: Probe, warmup: int, steps: int) -> dict[str, float]:
    rows = [r for r in probe.during_update if warmup <= r["step"] < warmup + steps]
    update_s = sum(r["update_s"] for r in rows)
    return {
        "updates": len(rows),
        "engine_forward_steps_during_updates": sum(r["engine_forward_steps"] for r in rows),
        "engine_thread_cpu_s_per_update_s": (
            sum(r["engine_thread_cpu_s"] for r in rows) / update_s if update_s else 0.0
        ),
        "learner_thread_cpu_s_per_update_s": (
            sum(r["learner_thread_cpu_s"] for r in rows) / update_s if update_s else 0.0
        ),
        # every thread but the engine's: the learner's OpenMP helpers count here, not above
        "non_engine_cpu_s_per_update_s": (
            sum(r["process_cpu_s"] - r["engine_thread_cpu_s"] for r in rows) / update_s
            if update_s
            else 0.0
        ),
    }
