"""Dynamic sampling (train.refill_groups) over the real rollout manager and in-process engine:
zero-spread groups are replaced by groups of further tasks, for a bounded number of rounds."""

from __future__ import annotations

import asyncio

from omegaconf import OmegaConf
from test_manager_support import CounterEnv, tiny_model_dir, tiny_tokenizer

import envs
from gspo_agents.batching import has_signal
from gspo_agents.refill import refill_groups
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager


def _cfg(rounds: int, tasks_per_step: int):
    return OmegaConf.create(
        {
            "trainer": {"tasks_per_step": tasks_per_step, "seed": 0},
            "algorithm": {
                "name": "gspo",
                "turn_discount": 1.0,
                "dynamic_sampling_rounds": rounds,
                "overlong_penalty": 0.0,
                "overlong_filter": False,
                "overlong_buffer": 0,
            },
            "rollout": {"max_new_tokens_per_turn": 5},
        }
    )


def _collect_and_refill(env_factory, tasks, cfg):
    engine = LocalEngine(tiny_model_dir(), max_batch_size=16, seed=0)
    rollout = RolloutConfig(num_samples_per_task=3, max_new_tokens_per_turn=5)
    manager = RolloutManager(engine, env_factory, tiny_tokenizer(), rollout)
    calls: list[int] = []
    collect = manager.collect

    async def counted(batch_tasks):
        calls.append(len(batch_tasks))
        return await collect(batch_tasks)

    manager.collect = counted  # type: ignore[method-assign]  # count the real collects

    async def go():
        try:
            first = await manager.collect(tasks[: cfg.trainer.tasks_per_step])
            metrics: dict = {}
            groups = await refill_groups(cfg, manager, tasks, 0, first.groups, metrics)
            return first.groups, groups, metrics
        finally:
            await manager.aclose()
            await engine.close()

    first, groups, metrics = asyncio.run(go())
    return first, groups, metrics, calls


def test_refill_keeps_only_groups_with_signal_within_the_round_budget():
    tasks = [{"id": f"t{i}", "turns": 1} for i in range(12)]
    cfg = _cfg(rounds=3, tasks_per_step=4)
    first, groups, metrics, calls = _collect_and_refill(lambda: CounterEnv(), tasks, cfg)
    zero_before = sum(not has_signal(g) for g in first) / len(first)
    assert metrics["zero_spread_frac_before_refill"] == zero_before
    assert all(has_signal(g) for g in groups) and len(groups) <= 4
    assert metrics["refill_rounds"] == len(calls) - 1 <= 3
    if metrics["refill_rounds"] < 3:
        assert len(groups) == 4  # stopped early only because the step was full


def test_refill_gives_up_after_the_budget_and_keeps_the_original_groups():
    # a random tiny model never answers arithmetic: every group has zero spread
    tasks = envs.make("arithmetic").load_tasks("train")
    cfg = _cfg(rounds=2, tasks_per_step=2)
    first, groups, metrics, calls = _collect_and_refill(lambda: envs.make("arithmetic"), tasks, cfg)
    assert metrics["zero_spread_frac_before_refill"] == 1.0
    assert metrics["refill_rounds"] == 2 and calls == [2, 2, 2]
    assert groups == first  # nothing found: prepare_batch counts and filters as without refill
