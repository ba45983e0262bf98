"""torchrun --nproc_per_node=2 rollout_ranks.py OUT_JSON: both ranks drive their share of each
batch (rollout_ranks.RankDrivers on rank 0, FollowerRollouts behind learner_group.follow on the
other), each on its own LocalEngine with the same weights; rank 0 also collects every task alone,
and writes both views to OUT_JSON for tests/test_rollout_ranks.py to compare."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_manager_support import CounterEnv, tiny_model_dir, tiny_tokenizer  # noqa: E402

from gspo_agents.learner_group import LearnerGroup, follow  # noqa: E402
from gspo_agents.rollout.local_engine import LocalEngine  # noqa: E402
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager  # noqa: E402
from gspo_agents.rollout_ranks import (  # noqa: E402
    FollowerRollouts,
    RankDriveError,
    RankDrivers,
    rollout_group,
)

TASKS = [{"id": c, "turns": 1 + i % 3} for i, c in enumerate("abcde")]


def build() -> RolloutManager:
    engine = LocalEngine(tiny_model_dir(), max_batch_size=16, seed=0)
    cfg = RolloutConfig(num_samples_per_task=2, max_new_tokens_per_turn=8, seed=7)
    return RolloutManager(engine, lambda: CounterEnv(max_turns=4), tiny_tokenizer(), cfg)


class NoLearner:  # the followers' learner commands are not under test here
    is_main = True

    def close(self) -> None:
        pass


def view(result) -> dict:
    groups = [[[t.task_id, t.token_ids, t.reward, str(t.status)] for t in g] for g in result.groups]
    return {"groups": groups, "metrics": result.metrics}


async def lead(group, world: int) -> dict:
    local = build()
    drivers = RankDrivers(local, group, world)
    try:
        out = {
            "merged": view(await drivers.collect(TASKS)),
            "one": view(await local.collect(TASKS)),
        }
        drivers.start_prefetch(TASKS)  # async mode's path
        out["prefetched"] = view(await drivers.next_batch())
        await drivers.update_weights(tiny_model_dir(), 1)  # every rank now samples at version 1
        out["merged_v1"] = view(await drivers.collect(TASKS))
        out["one_v1"] = view(await local.collect(TASKS))
        try:  # rank 1's share of one task is empty: its collect raises, rank 0 names it
            await drivers.collect(TASKS[:1])
        except RankDriveError as exc:
            out["failure"] = str(exc)
        return out
    finally:
        await local.aclose()
        await local.engine.close()


async def _close(engine) -> None:
    await engine.close()


def main(out_path: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    group = rollout_group()
    if rank:

        def built():
            manager = build()
            return manager, manager.engine

        follow(NoLearner(), FollowerRollouts(built, _close, rank, world, group))
    else:
        out = asyncio.run(lead(group, world))
        LearnerGroup(NoLearner()).close()  # STOP: the follower closes its rollouts
        Path(out_path).write_text(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
