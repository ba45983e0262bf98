"""Rollout metrics: the counters of one batch and the per-trajectory summaries.

Everything is prefixed `rollout/` so it never collides with the learner's metric names.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from gspo_agents.trajectory import Status, Trajectory


@dataclass(slots=True)
class RolloutStats:
    """Counters of one batch; turned into `RolloutResult.metrics` by `stats_metrics`."""

    started: float = field(default_factory=time.perf_counter)
    turns: int = 0
    length_turns: int = 0  # turns ended by max_new_tokens or the context budget
    env_steps: int = 0
    env_s: float = 0.0
    engine_calls: int = 0
    engine_s: float = 0.0
    engine_retries: int = 0
    aborted_generations: int = 0
    behind_version_generations: int = 0
    restarted_stale: int = 0
    dropped_stale: int = 0
    verify_errors: int = 0  # env steps whose info has "verify_error": the answer broke a verifier
    errors: collections.Counter = field(default_factory=collections.Counter)
    truncations: collections.Counter = field(default_factory=collections.Counter)


def stats_metrics(s: RolloutStats) -> dict[str, float]:
    wall = time.perf_counter() - s.started
    m = {
        "rollout/wall_s": wall,
        "rollout/turns": float(s.turns),
        "rollout/turns_per_s": s.turns / wall if wall > 0 else 0.0,
        "rollout/length_turn_frac": s.length_turns / s.turns if s.turns else 0.0,
        "rollout/env_steps": float(s.env_steps),
        "rollout/env_step_s_mean": s.env_s / s.env_steps if s.env_steps else 0.0,
        "rollout/env_step_s_total": s.env_s,
        "rollout/engine_calls": float(s.engine_calls),
        "rollout/engine_s_mean": s.engine_s / s.engine_calls if s.engine_calls else 0.0,
        "rollout/engine_retries": float(s.engine_retries),
        "rollout/aborted_generations": float(s.aborted_generations),
        "rollout/behind_version_generations": float(s.behind_version_generations),
        "rollout/restarted_stale": float(s.restarted_stale),
        "rollout/dropped_stale": float(s.dropped_stale),
        "rollout/verify_errors": float(s.verify_errors),
    }
    for kind in ("engine", "env_infra", "env_exception", "timeout"):
        m[f"rollout/error_{kind}"] = float(s.errors[kind])
    for reason in ("turns", "context", "prompt"):
        m[f"rollout/truncated_by_{reason}"] = float(s.truncations[reason])
    return m


def trajectory_metrics(groups: list[list[Trajectory]]) -> dict[str, float]:
    trajs = [t for g in groups for t in g]
    n = len(trajs)
    m: dict[str, float] = {"rollout/trajectories": float(n), "rollout/groups": float(len(groups))}
    for status in Status:
        count = sum(t.status == status for t in trajs)
        m[f"rollout/{status.value}"] = float(count)
        m[f"rollout/{status.value}_frac"] = count / n if n else 0.0
    scored = [t for t in trajs if t.trainable]
    m["rollout/reward_mean"] = sum(t.reward for t in scored) / len(scored) if scored else 0.0  # type: ignore[misc]
    m["rollout/response_tokens_mean"] = sum(t.num_model_tokens for t in trajs) / n if n else 0.0
    m["rollout/tokens_mean"] = sum(t.num_tokens for t in trajs) / n if n else 0.0
    m["rollout/num_turns_mean"] = sum(t.num_turns for t in trajs) / n if n else 0.0
    m["rollout/mixed_version_trajectories"] = float(sum(len(set(t.versions)) > 1 for t in trajs))
    spread = [g for g in groups if len([t for t in g if t.trainable]) >= 2]
    zero = sum(len({t.reward for t in g if t.trainable}) == 1 for g in spread)
    m["rollout/zero_spread_group_frac"] = zero / len(spread) if spread else 0.0
    return m
