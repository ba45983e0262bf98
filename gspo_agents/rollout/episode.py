"""Pieces of one episode outside the manager's loop: how a trajectory ends, request ids, and
the task and cancellation helpers the loop runs on.

- Endings: `TrajectoryFailed` (an expected failure: status error with a kind) and `Stale` (fell
  more than max_staleness_steps behind) leave the loop as exceptions; `mark_error` and
  `truncate` record the outcome on the trajectory and in the counters.
- `checked_step` validates an env's step result, so a malformed one is reported on its
  trajectory instead of crashing the batch.
- `request_id` makes engine request ids that route sticky by trajectory.
- `run_all` (a task group on 3.10) and `abort_quietly` (shielded abort of a cancelled request).

No I/O of its own beyond the engine abort; nothing here knows of HTTP or the learner.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import traceback
import uuid
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from gspo_agents.rollout.engine import Engine, EngineError
from gspo_agents.rollout.metrics import RolloutStats
from gspo_agents.trajectory import Status, Trajectory

log = logging.getLogger(__name__)
T = TypeVar("T")


class TrajectoryFailed(Exception):
    """An expected failure that ends one trajectory with status error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Stale(Exception):
    """A running trajectory fell more than max_staleness_steps behind the weights."""


def checked_step(result: Any) -> tuple[list, float, bool, bool, dict]:
    """The env's step result, validated: a malformed one is that env's bug, reported on its
    trajectory (env_exception), never a crash of the batch and never a NaN in the advantages."""
    if not isinstance(result, tuple) or len(result) != 5:
        raise TypeError(
            "step must return (messages, reward, terminated, truncated, info), "
            f"got {type(result).__name__} {str(result)[:80]!r}"
        )
    obs, reward, terminated, truncated, info = result
    try:
        reward = float(reward)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"step returned a non-numeric reward {reward!r}") from exc
    if not math.isfinite(reward):
        raise ValueError(f"step returned a non-finite reward {reward!r}")
    if not isinstance(obs, list) or not isinstance(info, dict):
        raise TypeError(
            f"step must return a list of messages and an info dict, got "
            f"{type(obs).__name__} and {type(info).__name__}"
        )
    return obs, reward, bool(terminated), bool(truncated), info


def check_messages(messages: Any, where: str) -> list:
    """Chat messages from an env (its opening messages or an observation): a list of
    {"role": str, "content": str} dicts. Anything else is the env's bug, named with the fix."""
    example = "[{'role': 'user', 'content': '...'}]"
    if not isinstance(messages, list):
        raise TypeError(
            f"{where} must return a list of chat messages like {example}, got "
            f"{type(messages).__name__} {str(messages)[:80]!r}"
        )
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str)):
            raise TypeError(
                f"{where} returned a malformed message at index {i}: {str(m)[:80]!r}; each must "
                f"be a dict with a 'role' and a 'content' string, like {example}"
            )
        if not isinstance(m.get("content", ""), str):
            raise TypeError(
                f"{where} returned message {i} with non-string content "
                f"{type(m['content']).__name__}; make it a string"
            )
    return messages


def note_cause(traj: Trajectory, exc: BaseException | None) -> None:
    """Keep the exception's type and traceback on a failed trajectory, for the run's report."""
    if exc is None:
        return
    traj.info["exception_type"] = type(exc).__name__
    traj.info["traceback"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def oldest_version(traj: Trajectory) -> int | None:
    # Versions only grow along a trajectory, so the first model token is the oldest one; this
    # avoids walking every token on every turn. An engine that answered from older weights
    # breaks that order: then walk them all.
    if traj.info.get("behind_version"):
        return traj.min_version
    for seg in traj.segments:
        if seg.kind == "model":
            return seg.versions[0]  # type: ignore[index]
    return None


_RID_PREFIX = uuid.uuid4().hex[:16]  # random per process: rids of two processes never collide
_rid_counter = itertools.count()


def request_id(traj: Trajectory) -> str:
    # "<trajectory uid>-<32 hex>": SGLang aborts by rid PREFIX and these all have one length, so no
    # rid is a prefix of another; the trajectory uid in front lets an engine route sticky by it
    # (SGLangEngine strips the "-<32 hex>" tail). A counter instead of uuid4: no syscall per turn.
    return f"{traj.uid}-{_RID_PREFIX}{next(_rid_counter):016x}"


async def abort_quietly(engine: Engine, rid: str) -> None:
    """Abort a request we stopped waiting for; shielded so a second cancel cannot cut it short."""
    try:
        await asyncio.shield(engine.abort(rid))
    except EngineError as exc:
        log.warning("could not abort request %s: %s", rid, exc)


def truncate(traj: Trajectory, reason: str, stats: RolloutStats) -> None:
    traj.status = Status.TRUNCATED
    traj.info["truncated_by"] = reason
    stats.truncations[reason] += 1


def mark_error(traj: Trajectory, kind: str, message: str, stats: RolloutStats) -> None:
    traj.status = Status.ERROR
    traj.reward = None
    traj.error = message
    traj.info["error_kind"] = kind
    traj.close_turn()
    stats.errors[kind] += 1


async def run_all(coros: Iterable[Awaitable[T]]) -> list[T]:
    """Run coroutines concurrently; if one raises (a bug) or we are cancelled, cancel the rest.

    asyncio.TaskGroup semantics on Python 3.10 as well: every task is referenced and awaited.
    """
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
