"""Staleness bookkeeping for partial and asynchronous rollouts: pure functions, no I/O.

A trajectory's staleness is how many weight updates separate the OLDEST token in it from the
weights the learner will train with: `current_version - min(token versions)`. Partial rollouts mix
versions (tokens made before a weight update keep their old version), so the oldest token decides.
A trajectory with no model token yet is never stale.

`max_staleness_steps = 0` is on-policy: any token from older weights disqualifies the trajectory.
`max_staleness_steps = 1` allows the usual one-step overlap of generation k+1 with training k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gspo_agents.trajectory import Trajectory

__all__ = [
    "StalenessReport",
    "staleness",
    "is_stale",
    "drop_stale",
    "max_prefetch_depth",
    "stale_token_mask",
]


def staleness(min_version: int | None, current_version: int) -> int:
    """Weight updates between the oldest token and `current_version` (0 without tokens)."""
    if min_version is None:
        return 0
    if min_version > current_version:
        raise ValueError(
            f"a token carries weight version {min_version}, newer than the current version "
            f"{current_version}: versions must only grow"
        )
    return current_version - min_version


def is_stale(min_version: int | None, current_version: int, max_staleness_steps: int) -> bool:
    if max_staleness_steps < 0:
        raise ValueError(f"max_staleness_steps must be >= 0, got {max_staleness_steps}")
    return staleness(min_version, current_version) > max_staleness_steps


@dataclass(frozen=True, slots=True)
class StalenessReport:
    groups: list[list[Trajectory]]  # the kept trajectories, grouped as given; empty groups removed
    dropped: int  # trajectories dropped for staleness
    max_kept_staleness: int
    mean_kept_staleness: float


def drop_stale(
    groups: Sequence[Sequence[Trajectory]], current_version: int, max_staleness_steps: int
) -> StalenessReport:
    """Remove trajectories older than `max_staleness_steps`; a group keeps its fresh members.

    Only the stale trajectory goes, not its whole group: the survivors still share one task, so
    their group-relative advantage stays meaningful (with fewer samples).
    """
    kept_groups: list[list[Trajectory]] = []
    dropped = 0
    ages: list[int] = []
    for group in groups:
        kept = []
        for traj in group:
            age = staleness(traj.min_version, current_version)
            if age > max_staleness_steps:
                dropped += 1
            else:
                kept.append(traj)
                ages.append(age)
        if kept:
            kept_groups.append(kept)
    mean_age = sum(ages) / len(ages) if ages else 0.0
    return StalenessReport(kept_groups, dropped, max(ages, default=0), mean_age)


def max_prefetch_depth(max_staleness_steps: int) -> int:
    """How many batches async mode may collect ahead of the learner.

    A batch started under version v and consumed after d more updates is d steps stale at best,
    so prefetching deeper than the staleness bound only produces data that will be dropped. One
    batch ahead is always allowed; with a bound of 0 its old-version tokens are dropped (partial
    trajectories restart), which keeps training on-policy at the cost of wasted generation.
    """
    if max_staleness_steps < 0:
        raise ValueError(f"max_staleness_steps must be >= 0, got {max_staleness_steps}")
    return max(1, max_staleness_steps)


def stale_token_mask(
    versions_BT: torch.Tensor, loss_mask_BT: torch.Tensor, current_version: int, max_lag: int
) -> torch.Tensor:
    """The loss mask without model tokens made more than `max_lag` weight versions before
    `current_version` (bool [B, T]). Partial rollouts mix versions; this drops only the stale
    tokens of a trajectory, where `drop_stale` drops whole trajectories."""
    if max_lag < 0:
        raise ValueError(f"rollout.max_version_lag must be >= 0, got {max_lag}")
    return loss_mask_BT.bool() & (versions_BT >= current_version - max_lag)
