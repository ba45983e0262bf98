"""Two gloo processes share the driving (rollout.drivers=all_ranks): rank 0's gathered, merged
batch is the one it collects alone with the same seed, before and after a weight update that
only rank 0 made, on the sync (collect) and async (prefetch) paths; a follower's failure is
raised on rank 0, naming the rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from launch import torchrun  # noqa: E402

COUNTS = ("rollout/turns", "rollout/trajectories", "rollout/groups", "rollout/reward_mean")


def test_two_ranks_drive_shares_that_gather_into_the_one_rank_batch(tmp_path):
    out = tmp_path / "out.json"
    torchrun("rollout_ranks.py", str(out), nproc=2, timeout_s=600)
    got = json.loads(out.read_text())
    assert got["merged"]["groups"] == got["one"]["groups"]
    assert got["prefetched"]["groups"] == got["one"]["groups"]
    assert got["merged_v1"]["groups"] == got["one_v1"]["groups"]
    assert got["merged_v1"]["groups"] != got["one"]["groups"]  # version 1 seeds other samples
    assert [g[0][0] for g in got["merged"]["groups"]] == list("abcde")  # task order
    for key in COUNTS:
        assert got["merged"]["metrics"][key] == pytest.approx(got["one"]["metrics"][key]), key
    assert got["merged_v1"]["metrics"]["rollout/weight_version"] == 1.0
    assert "rank 1's rollouts failed" in got["failure"] and "at least one task" in got["failure"]


@pytest.mark.slow
def test_a_rollout_worker_process_drives_what_the_training_process_would():
    """rollout.driver_process=true: the spawned child (its own LocalEngine, envs) collects the
    same seeded batch as an in-process manager, takes a weight update, and a failure in it is
    raised in the parent with the child's traceback."""
    import asyncio

    from hydra import compose, initialize_config_dir
    from test_manager_support import tiny_model_dir, tiny_tokenizer

    import envs
    from gspo_agents.components import build_driver, build_env_factory
    from gspo_agents.config import CONFIG_DIR, register_schemas
    from gspo_agents.rollout_process import RolloutProcessError

    overrides = ["rollout.seed=4", "rollout.num_samples_per_task=2", "+env.kwargs.difficulty=1"]
    overrides += ["rollout.max_new_tokens_per_turn=8"]
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
        child_cfg = compose(
            config_name="config", overrides=[*overrides, "rollout.driver_process=true"]
        )
    tasks = envs.make(cfg.env.name, difficulty=1).load_tasks("train")[:3]
    tokenizer = tiny_tokenizer()
    factory = build_env_factory(cfg, None)

    async def collect(c):
        driver, engine = build_driver(c, tiny_model_dir(), tokenizer, factory)
        try:
            first = await driver.collect(tasks)
            await driver.update_weights(tiny_model_dir(), 1)
            after = await driver.collect(tasks)
            failure = None
            try:
                await driver.next_batch()  # nothing prefetched: the manager refuses
            except (RolloutProcessError, RuntimeError) as exc:
                failure = exc
            return first, after, driver.weight_version, failure
        finally:
            await driver.aclose()
            if engine is not None:
                await engine.close()

    def view(result):
        return [[(t.task_id, t.token_ids, t.reward) for t in g] for g in result.groups]

    here, there = asyncio.run(collect(cfg)), asyncio.run(collect(child_cfg))
    assert view(there[0]) == view(here[0]) and view(there[1]) == view(here[1])
    assert view(there[1]) != view(there[0])  # version 1 seeds other samples
    assert there[2] == 1
    assert isinstance(there[3], RolloutProcessError) and "no batch is being prefetched" in str(
        there[3]
    )
