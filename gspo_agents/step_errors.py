"""Failures that surface: what went wrong in a step's trajectories, shown where people look.

A trajectory that failed (env exception, infrastructure error, engine failure, deadline) is
marked `error`, counted and never trained on. This module makes those failures visible:
- `ErrorReport.of_step`: the step's errors by kind; the first trajectory of each kind keeps its
  message and traceback;
- `ErrorReport.show`: on the console, the traceback of a kind the first time the run sees it,
  then one line per step while it recurs (the console line's `errors` column counts them every
  step); train.log gets the console's lines and, every step, each kind's first traceback;
- `FailedSteps`: stop the run with a clear message after `limit` consecutive steps in which not
  one trajectory could be trained on (every one failed), instead of "training" on nothing;
- `RunErrors`: both, step after step, for the training loop.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from gspo_agents.trajectory import Status, Trajectory


@dataclass(slots=True)
class ErrorReport:
    counts: Counter = field(default_factory=Counter)
    first: dict[str, Trajectory] = field(default_factory=dict)  # kind -> first failed trajectory
    num_trajectories: int = 0

    @classmethod
    def of_step(cls, groups: list[list[Trajectory]]) -> ErrorReport:
        report = cls()
        for traj in (t for g in groups for t in g):
            report.num_trajectories += 1
            if traj.status != Status.ERROR:
                continue
            kind = error_kind(traj)
            report.counts[kind] += 1
            report.first.setdefault(kind, traj)
        return report

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        return ", ".join(f"{kind} ×{n}" for kind, n in self.counts.most_common())

    def show(
        self,
        step: int,
        seen: set[str],
        out: IO[str] | None = None,
        log_only: Callable[[str], None] = lambda text: None,
    ) -> None:
        """Print each kind's traceback the first time the run sees it, a line otherwise; the
        traceback of a recurring kind goes to `log_only` (train.log)."""
        out = out or sys.stderr
        for kind, n in self.counts.most_common():
            traj = self.first[kind]
            head = (
                f"step {step}: {n}/{self.num_trajectories} trajectories failed with {kind} "
                f"(first: task {traj.task_id!r}): {traj.error}"
            )
            trace = traj.info.get("traceback") or "(no traceback: the failure raised nothing)\n"
            if kind in seen:
                print(head, file=out, flush=True)
                log_only(trace)
                continue
            seen.add(kind)
            print(f"{head}\n{trace}", end="", file=out, flush=True)


def error_kind(traj: Trajectory) -> str:
    """`env_exception:ValueError`, `engine`, `timeout`, ...: one kind per cause."""
    kind = str(traj.info.get("error_kind", "error"))
    exc_type = traj.info.get("exception_type")
    return f"{kind}:{exc_type}" if exc_type else kind


class RunStalled(RuntimeError):
    """Too many consecutive steps in which every trajectory failed."""


class FailedSteps:
    """Counts consecutive steps without one trainable trajectory; `limit` 0 never stops."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.consecutive = 0

    def record(self, step: int, report: ErrorReport) -> None:
        trainable = report.num_trajectories - report.total
        self.consecutive = 0 if trainable > 0 else self.consecutive + 1
        if self.limit and self.consecutive >= self.limit:
            raise RunStalled(
                f"stopping at step {step}: {self.consecutive} consecutive steps without a single "
                f"trainable trajectory (step {step}: {report.summary() or 'no trajectories'}). "
                "The first error of each kind is shown above with its traceback. Fix the cause "
                "(your env, the engine, the sandbox), or allow more failed steps with "
                "trainer.max_failed_steps=N (0: never stop)"
            )


class RunErrors:
    """The training loop's view of failed trajectories: each step's report shown (a kind's
    traceback the first time the run sees it) and the run stopped by `FailedSteps`."""

    def __init__(self, max_failed_steps: int, log_only: Callable[[str], None]) -> None:
        self.failed_steps = FailedSteps(max_failed_steps)
        self.seen: set[str] = set()
        self.log_only = log_only

    def after_step(self, step: int, report: ErrorReport) -> None:
        report.show(step, self.seen, log_only=self.log_only)
        self.failed_steps.record(step, report)
