"""Failures that surface: what went wrong in a step's trajectories, shown where people look.

A trajectory that failed (env exception, infrastructure error, engine failure, deadline) is
marked `error`, counted and never trained on. This module makes those failures visible:
- `ErrorReport.of_step`: the step's errors by kind; the first trajectory of each kind keeps its
  message and traceback;
- `ErrorReport.show`: on the console, the traceback of a kind the first time the run sees it,
  then one line per step while it recurs (the console line's `errors` column counts them every
  step); train.log gets the console's lines and, every step, each kind's first traceback;
- `untrained_reason`: why a step moved the policy not at all (every trajectory failed, was cut
  before generating, or every group scored one reward), shown on the console every such step;
- `FailedSteps`: stop the run with a clear message after `limit` consecutive steps that trained
  nothing, whatever the cause, instead of "training" on nothing in silence;
- `RunErrors`: all of it, step after step, for the training loop.
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
    """Too many consecutive steps that trained nothing."""


def untrained_reason(groups: list[list[Trajectory]], metrics: dict) -> str | None:
    """Why a step moved the policy not at all (`num_signal_seqs` of `prepare_batch` is 0), in
    words a user can act on; None when it trained."""
    if metrics.get("num_signal_seqs", 0) > 0:
        return None
    trajs = [t for g in groups for t in g]
    n = len(trajs)
    if not n:
        return "no trajectories were collected"
    scored = [t for t in trajs if t.trainable]
    if not scored:
        return "no trajectory finished with a reward: " + _unscored(trajs)
    cut = sum(t.status == Status.TRUNCATED for t in scored)
    cut_note = f"; {cut}/{n} were cut by a length or turn budget" if cut else ""
    if all(len({t.reward for t in g if t.trainable}) <= 1 for g in groups):
        values = sorted({float(t.reward) for t in scored})  # type: ignore[arg-type]
        shown = ", ".join(f"{v:g}" for v in values[:4]) + (", ..." if len(values) > 4 else "")
        return (
            f"zero reward spread: in every group all samples scored the same (rewards: {shown})"
            f"{cut_note}; GSPO learns only from reward differences within a group"
            f"{episode_evidence(scored)}"
        )
    return (
        "every trajectory with reward spread was cut by a length budget and left out of the "
        "loss (algorithm.overlong_filter=true)"
    )


def episode_evidence(trajs: list[Trajectory]) -> str:
    """What tool episodes did, from the envs' counters (`env_metrics`): the tool calls attempted,
    parsed and run, and for graded envs how many were graded (tests run) and resolved; "" for
    envs without tools. Says why a tool or SWE step scored 0 without opening the samples."""
    counters = [t.info.get("env_metrics") or {} for t in trajs]
    if not any("tool_call_attempts" in c for c in counters):
        return ""
    n = len(trajs)

    def total(key: str) -> int:
        return int(sum(c.get(key, 0) for c in counters))

    attempted = total("tool_call_attempts")
    calling = sum(c.get("tool_call_attempts", 0) > 0 for c in counters)
    parts = [
        f"tool calls: {attempted} attempted in {calling}/{n} episodes, "
        f"{attempted - total('parse_failures')} parsed, {total('tool_calls')} ran"
    ]
    if "resolved" in set().union(*counters):
        last = [(t.info.get("turn_infos") or [{}])[-1] for t in trajs]
        graded = sum(i.get("grade_reason", "not graded") != "not graded" for i in last)
        parts.append(
            f"{total('submitted')}/{n} submitted, tests run in {graded}/{n}, "
            f"{total('resolved')}/{n} resolved"
        )
    if not attempted:
        parts.append(
            "no episode called a tool: the model does not use the tool-call format yet "
            "(a cold start on the env's reference episodes teaches it; see trainer.sft)"
        )
    return " (" + "; ".join(parts) + ")"


def _unscored(trajs: list[Trajectory]) -> str:
    n = len(trajs)
    errors = Counter(error_kind(t) for t in trajs if t.status == Status.ERROR)
    prompt = sum(t.info.get("truncated_by") == "prompt" for t in trajs)
    parts = []
    if errors:
        kinds = ", ".join(f"{k} ×{c}" for k, c in errors.most_common())
        parts.append(f"{errors.total()}/{n} failed ({kinds})")
    if prompt:
        parts.append(
            f"{prompt}/{n} were truncated before generating a token: the prompt fills "
            "rollout.max_context_tokens (raise it)"
        )
    rest = n - errors.total() - prompt
    if rest:
        parts.append(f"{rest}/{n} ended without a reward")
    return "; ".join(parts)


class FailedSteps:
    """Counts consecutive steps that trained nothing; `limit` 0 never stops.

    One kind of step is not counted: a converged one (`converged`: every group's samples agree,
    different tasks differently) once the run has trained. Such a policy learned its tasks and
    answers each deterministically at this temperature; each such step is still shown, but the
    run goes on. Every other cause counts, including a zero spread that is one value over the
    whole batch (a constant reward, or a policy that collapsed to reward 0) and a converged-looking
    batch before the run ever trained (a reward that depends on the task, not the answer)."""

    def __init__(self, limit: int, trained_before: bool = False) -> None:
        self.limit = limit
        self.consecutive = 0
        self.trained = trained_before  # a step has trained (or the run resumed from one)

    def record(self, step: int, reason: str | None, converged: bool = False) -> None:
        if reason is None:
            self.consecutive, self.trained = 0, True
            return
        if converged and self.trained:
            return
        self.consecutive += 1
        if self.limit and self.consecutive >= self.limit:
            raise RunStalled(
                f"stopping at step {step}: {self.consecutive} consecutive steps trained nothing "
                f"(step {step}: {reason}). Fix the cause (your env's rewards or prompts, the "
                "engine, the sandbox; a failure's traceback is shown above), or allow more such "
                "steps with trainer.max_failed_steps=N (0: never stop)"
            )


def converged(groups: list[list[Trajectory]]) -> bool:
    """Every group's scored samples agree, and the groups do not all agree with each other: the
    policy answers each task one way (some right, some wrong), not a reward that is constant."""
    per_group = [{t.reward for t in g if t.trainable} for g in groups]
    if not per_group or any(len(r) != 1 for r in per_group):
        return False
    return len(set().union(*per_group)) > 1


class RunErrors:
    """The training loop's view of failed steps: each step's failed trajectories shown (a kind's
    traceback the first time the run sees it), a line saying why a step trained nothing, and the
    run stopped by `FailedSteps`."""

    def __init__(
        self, max_failed_steps: int, log_only: Callable[[str], None], trained_before: bool = False
    ) -> None:
        self.failed_steps = FailedSteps(max_failed_steps, trained_before)
        self.seen: set[str] = set()
        self.log_only = log_only

    def after_step(
        self,
        step: int,
        report: ErrorReport,
        untrained: str | None,
        out: IO[str] | None = None,
        groups: list[list[Trajectory]] | None = None,
    ) -> None:
        report.show(step, self.seen, log_only=self.log_only)
        done = untrained is not None and groups is not None and converged(groups)
        if done and self.failed_steps.trained:
            untrained = f"{untrained} (converged: not counted as a failed step, the run trained)"
        if untrained is not None:
            print(f"step {step} trained nothing: {untrained}", file=out or sys.stderr, flush=True)
        self.failed_steps.record(step, untrained, converged=done)
