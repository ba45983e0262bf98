"""A training step's rollouts (`collect_step`: prefetched in async mode, else collected now) and
dynamic sampling (DAPO): refill a step's groups without reward spread with groups of tasks the
step has not used yet."""

from __future__ import annotations

from gspo_agents.batching import (
    has_signal,
    refill_task_indices,
    task_indices_for_step,
    tasks_for_step,
)


async def refill_groups(cfg, manager, tasks, step: int, groups: list, metrics: dict) -> list:
    """Dynamic sampling (DAPO): drop groups without reward spread and draw further tasks, for at
    most `algorithm.dynamic_sampling_rounds` extra rounds. Each round draws `tasks_per_step` tasks
    the step has not used yet (a whole generation batch, as DAPO does), and the step keeps the
    first `tasks_per_step` groups with signal. The draw is a function of (step, round, seed), so a
    resumed run draws the same tasks."""
    t, a = cfg.trainer, cfg.algorithm

    def signal(g) -> bool:
        return has_signal(
            g,
            per_turn=a.name == "gspo_token",
            turn_discount=a.turn_discount,
            overlong_penalty=a.overlong_penalty,
            overlong_filter=a.overlong_filter,
            overlong_buffer=a.overlong_buffer,
            max_new_tokens_per_turn=cfg.rollout.max_new_tokens_per_turn,
        )

    kept = [g for g in groups if signal(g)]
    metrics["zero_spread_frac_before_refill"] = 1.0 - len(kept) / max(len(groups), 1)
    used = set(task_indices_for_step(len(tasks), step, t.tasks_per_step, t.seed))
    rounds = 0
    while len(kept) < t.tasks_per_step and rounds < a.dynamic_sampling_rounds:
        draw = refill_task_indices(len(tasks), step, rounds + 1, t.tasks_per_step, t.seed, used)
        if not draw:
            break  # every task of the split is already in this step
        rounds += 1
        used.update(draw)
        more = await manager.collect([tasks[i] for i in draw])
        kept += [g for g in more.groups if signal(g)]
    metrics["refill_rounds"] = float(rounds)
    return kept[: t.tasks_per_step] if kept else groups


async def collect_step(manager, tasks, step: int, t, cfg=None):
    """The rollouts of `step`: prefetched (async mode, then the next prefetch starts) or now;
    with `algorithm.dynamic_sampling_rounds` (sync mode only) zero-spread groups are refilled."""
    if not t.async_rollouts:
        result = await manager.collect(tasks_for_step(tasks, step, t.tasks_per_step, t.seed))
        if cfg is not None and cfg.algorithm.dynamic_sampling_rounds:
            result.groups = await refill_groups(
                cfg, manager, tasks, step, result.groups, result.metrics
            )
        return result
    result = await manager.next_batch()
    if step + 1 < t.steps:
        manager.start_prefetch(tasks_for_step(tasks, step + 1, t.tasks_per_step, t.seed))
    return result
