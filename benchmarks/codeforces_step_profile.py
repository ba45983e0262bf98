"""Where a codeforces training step's wall time goes (issue 33, Deliver 5).

Runs `python -m gspo_agents.train env=codeforces ...` in this process, with timers wrapped
around the trainer's phases (nothing in the package changes), and prints one table of seconds
per step: generation (engine calls), judging (env steps = sandbox runs), how much of the two
overlapped, the learner update, weight export and the engine's reload, logging/checkpointing
and the rest. "busy" columns are the wall time during which at least one call of that kind was
in flight (the union of their intervals), not the sum over concurrent episodes.

Run:  python benchmarks/codeforces_step_profile.py [--steps 4] [--tasks 2] [--group 4]
          [--sandbox auto] [-- extra train overrides ...]
The first step also pays warm-up (compilation of caches, the sandbox's first start); the table
gives it and the mean of the others.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import tempfile
import time
from collections import defaultdict

from gspo_agents import samples, train
from gspo_agents.learner_group import LearnerGroup
from gspo_agents.rollout.manager import RolloutManager
from gspo_agents.tracking import BenchProgress, RunTracker

EVENTS: list[tuple[str, float, float]] = []  # (phase, start, end), perf_counter seconds
STEP_STARTS: list[float] = []
PHASES = "generate judge collect update export reload log".split()


def timed(phase: str, owner, name: str, on_start=None) -> None:
    """Wraps `owner.name` (sync or async) so each call appends a `phase` interval."""
    fn = getattr(owner, name)
    if hasattr(fn, "__wrapped__"):
        return
    if asyncio_function(fn):

        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            if on_start:
                on_start()
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                EVENTS.append((phase, start, time.perf_counter()))

    else:

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                EVENTS.append((phase, start, time.perf_counter()))

    setattr(owner, name, wrapper)


def asyncio_function(fn) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn)


def instrument(progress: BenchProgress) -> None:
    def step_started() -> None:
        STEP_STARTS.append(time.perf_counter())
        progress.tick(len(STEP_STARTS) - 1)

    timed("collect", RolloutManager, "collect", on_start=step_started)
    timed("generate", RolloutManager, "_generate")
    timed("judge", RolloutManager, "_env_step")
    timed("update", LearnerGroup, "update")
    timed("export", LearnerGroup, "export_hf")
    timed("reload", RolloutManager, "update_weights")
    timed("log", RunTracker, "log")
    timed("console", RunTracker, "console")
    timed("log", samples, "save_if_due")
    timed("log", LearnerGroup, "save_checkpoint")  # periodic and the final one


def union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def per_step() -> list[dict[str, float]]:
    # a step ends where the next begins; the last one at its console line, before the run's
    # final checkpoint and teardown (which are no step's)
    last_console = max(e for phase, s, e in EVENTS if phase == "console")
    bounds = [*STEP_STARTS, last_console]
    rows = []
    for i in range(len(STEP_STARTS)):
        lo, hi = bounds[i], bounds[i + 1]
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for phase, s, e in EVENTS:
            if lo <= s < hi:
                spans[phase].append((s, e))
        spans["log"] += spans["console"]
        row = {p: union(spans[p]) for p in PHASES}
        both = union(spans["generate"] + spans["judge"])
        row["overlap"] = row["generate"] + row["judge"] - both
        row["step"] = hi - lo
        named = row["collect"] + row["update"] + row["export"] + row["reload"] + row["log"]
        row["other"] = row["step"] - named  # prepare_batch, advantages, bookkeeping
        rows.append(row)
    return rows


COLUMNS = [
    ("step", "step wall"),
    ("collect", "rollout (gen+judge)"),
    ("generate", "generation busy"),
    ("judge", "judging busy"),
    ("overlap", "gen ∥ judge"),
    ("update", "update"),
    ("export", "export"),
    ("reload", "reload"),
    ("log", "log+ckpt"),
    ("other", "other"),
]


def table(rows: list[dict[str, float]]) -> str:
    head = "| step | " + " | ".join(label for _, label in COLUMNS) + " |"
    lines = [head, "|---|" + "---:|" * len(COLUMNS)]
    shown = [("1 (warm-up)", rows[0])]
    if len(rows) > 1:
        rest = rows[1:]
        mean = {k: sum(r[k] for r in rest) / len(rest) for k in rest[0]}
        shown.append((f"mean of 2–{len(rows)}", mean))
    for name, row in shown:
        cells = []
        for key, _ in COLUMNS:
            share = f" ({100 * row[key] / row['step']:.0f}%)" if key != "step" else ""
            cells.append(f"{row[key]:.2f} s{share}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--tasks", type=int, default=2, help="trainer.tasks_per_step")
    p.add_argument("--group", type=int, default=4, help="rollout.num_samples_per_task")
    p.add_argument("--sandbox", default="auto", help="sandbox config: auto, docker, bubblewrap …")
    p.add_argument("extra", nargs="*", help="more train overrides (after --)")
    args = p.parse_args()
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    progress = BenchProgress("codeforces steps", args.steps)
    instrument(progress)
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            "env=codeforces",
            f"sandbox={args.sandbox}",
            f"trainer.steps={args.steps}",
            f"trainer.tasks_per_step={args.tasks}",
            f"rollout.num_samples_per_task={args.group}",
            f"trainer.run_dir={tmp}/run",
            *args.extra,
        ]
        command = "python -m gspo_agents.train " + " ".join(overrides)
        load_before = os.getloadavg()
        argv, sys.argv = sys.argv, ["gspo_agents.train", *overrides]
        try:
            with contextlib.suppress(SystemExit):
                train.cli()
        finally:
            sys.argv = argv
    progress.tick(len(STEP_STARTS))
    if not STEP_STARTS:
        sys.exit("the run finished no step: see its error above")
    load_after = os.getloadavg()
    print(f"command: {command}")
    print(
        f"load average before {load_before[0]:.1f} / after {load_after[0]:.1f} "
        f"(1 min), {os.cpu_count()} cores"
    )
    print(table(per_step()))


if __name__ == "__main__":
    main()
