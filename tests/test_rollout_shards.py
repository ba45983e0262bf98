"""Ranks share the driving: group g on rank g % world, and the merged shares are the batch one
process collects (same tokens, rewards, counts) when `rollout.seed` fixes the sampling."""

from __future__ import annotations

import asyncio

import pytest
from test_manager_support import CounterEnv, tiny_model_dir, tiny_tokenizer

from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.rollout.shards import merge_shards, shard_tasks

TASKS = [{"id": c, "turns": 1 + i % 3} for i, c in enumerate("abcde")]


def test_every_task_is_driven_by_exactly_one_rank_in_turn():
    shares = [shard_tasks(TASKS, r, 2) for r in range(2)]
    assert [[t["id"] for t in s] for s in shares] == [["a", "c", "e"], ["b", "d"]]
    assert shard_tasks(TASKS, 0, 1) == TASKS
    with pytest.raises(ValueError, match="rank 2 of world 2"):
        shard_tasks(TASKS, 2, 2)


async def _collect(tasks: list[dict]):
    engine = LocalEngine(tiny_model_dir(), max_batch_size=16, seed=0)
    cfg = RolloutConfig(num_samples_per_task=2, max_new_tokens_per_turn=8, seed=7)
    manager = RolloutManager(engine, lambda: CounterEnv(max_turns=4), tiny_tokenizer(), cfg)
    try:
        return await manager.collect(tasks)
    finally:
        await manager.aclose()
        await engine.close()


def test_two_ranks_shares_merge_into_the_one_rank_batch():
    one = asyncio.run(_collect(TASKS))
    merged = merge_shards([asyncio.run(_collect(shard_tasks(TASKS, r, 2))) for r in range(2)])

    def view(result):
        return [[(t.task_id, t.token_ids, t.reward, t.status) for t in g] for g in result.groups]

    assert view(merged) == view(one)
    assert sum(t.num_turns for t in one.trajectories) > len(one.trajectories)  # multi-turn
    for key in ("rollout/turns", "rollout/trajectories", "rollout/reward_mean", "rollout/groups"):
        assert merged.metrics[key] == pytest.approx(one.metrics[key]), key
    assert merged.metrics["rollout/turns_per_s"] > 0
