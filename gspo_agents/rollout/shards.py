"""Which groups a driving process carries, and one batch again from every process's share.

Group g of a step (its g-th task) is driven by rank g % world. With `rollout.seed` set, a
trajectory's tokens are a pure function of (seed, weight version, task, sample, length) (see
`RolloutManager._sampling`), so the merged batch equals the one a single process collects.
Pure functions: moving the shares (a gather over the ranks) is the caller's part. This module
does not start processes and knows nothing of torch.distributed.
"""

from __future__ import annotations

from gspo_agents.rollout.metrics import trajectory_metrics
from gspo_agents.rollout.records import RolloutResult

# per-batch means, re-weighted by their count when shares merge: mean key -> count key
_WEIGHTED = {
    "rollout/length_turn_frac": "rollout/turns",
    "rollout/env_step_s_mean": "rollout/env_steps",
    "rollout/engine_s_mean": "rollout/engine_calls",
    "rollout/staleness_mean": "rollout/trajectories",
}
_MAX = {
    "rollout/wall_s",
    "rollout/staleness_max",
    "rollout/weight_version",
    "rollout/update_dropped_workers",
}


def shard_tasks(tasks: list[dict], rank: int, world: int) -> list[dict]:
    """The tasks rank `rank` of `world` drives: every world-th, starting at its rank."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} of world {world}: need world >= 1 and 0 <= rank < world")
    return tasks[rank::world]


def merge_shards(shares: list[RolloutResult]) -> RolloutResult:
    """One step's result from the shares of ranks 0..world-1 (share r holds groups r, r+world, …):
    groups in task order; counters summed, means re-weighted, the trajectory metrics recomputed
    over all groups, turns/s over the slowest share's wall time."""
    world = len(shares)
    if world == 1:
        return shares[0]
    groups = []
    for i in range(max(len(s.groups) for s in shares)):
        groups += [s.groups[i] for s in shares if i < len(s.groups)]
    metrics: dict[str, float] = {}
    for key in {k for s in shares for k in s.metrics}:
        values = [s.metrics.get(key, 0.0) for s in shares]
        if key in _MAX:
            metrics[key] = max(values)
        elif key in _WEIGHTED:
            counts = [s.metrics.get(_WEIGHTED[key], 0.0) for s in shares]
            total = sum(counts)
            metrics[key] = sum(v * c for v, c in zip(values, counts)) / total if total else 0.0
        else:
            metrics[key] = sum(values)
    metrics.update(trajectory_metrics(groups))
    wall = metrics.get("rollout/wall_s", 0.0)
    metrics["rollout/turns_per_s"] = metrics.get("rollout/turns", 0.0) / wall if wall else 0.0
    return RolloutResult(groups, metrics)
