"""RolloutManager over real HTTP: `python -m gspo_agents.serve` subprocesses + SGLangEngine.

Covers multi-turn trajectories whose env segments are masked, a partial rollout across a weight
update (tokens before and after carry different versions; the resumed part's log-probs are the
new weights'), and a worker killed mid-rollout (trajectories resume on the survivor or are marked
error; the step completes; the restarted worker is used again).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from test_manager_support import (
    CounterEnv,
    forward_logprobs,
    model_positions,
    perturbed_weights,
    tiny_model_dir,
    tiny_tokenizer,
)

from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.rollout.sglang_engine import SGLangEngine
from gspo_agents.rollout.staleness import stale_token_mask
from gspo_agents.serve import ServerProcess, launch
from gspo_agents.trajectory import Status, flatten

SERVER_ARGS = ["--num-threads", "1", "--max-batch-size", "16"]


@pytest.fixture(scope="module")
def model_dir() -> str:
    return tiny_model_dir()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def server(model_dir):
    with launch(model_path=model_dir, extra_args=SERVER_ARGS) as proc:
        yield proc


@pytest.fixture(autouse=True)
def _gauges():
    CounterEnv.reset_gauges()
    yield
    CounterEnv.reset_gauges()


def _manager(engine, tokenizer, **cfg) -> RolloutManager:
    cfg = {"num_samples_per_task": 2, "max_new_tokens_per_turn": 12, **cfg}
    return RolloutManager(engine, lambda: CounterEnv(), tokenizer, RolloutConfig(**cfg))


def _assert_engine_saw_these_ids(traj, model_dir: str, version_dirs: dict[int, str]) -> None:
    """Every model token's engine log-prob equals a plain forward of the weights of its version
    over the assembled ids: the ids are byte for byte what the server continued from."""
    refs = {v: forward_logprobs(d, traj.token_ids) for v, d in version_dirs.items()}
    for pos, _, lp, version in model_positions(traj):
        if version in refs:
            assert lp == pytest.approx(refs[version][pos], abs=1e-4), (pos, version)


async def test_multi_turn_over_http_masks_env_segments(server, tokenizer, model_dir):
    engine = SGLangEngine([server.url])
    try:
        mgr = _manager(engine, tokenizer)
        result = await mgr.collect([{"id": "h", "turns": 3}])
    finally:
        await engine.close()
    trajs = result.trajectories
    assert len(trajs) == 2 and all(t.status == Status.COMPLETE for t in trajs)
    # Every turn's request carried its trajectory id as the routing key (X-SMG-Routing-Key).
    async with httpx.AsyncClient() as client:
        keys = _stats((await client.get(server.url + "/server_info")).json())["routing_keys"]
    assert all(keys.get(t.uid) == 3 for t in trajs), keys
    batch = flatten(trajs, [1.0, -1.0], pad_id=0)
    for row, traj in enumerate(trajs):
        assert [s.kind for s in traj.segments] == ["model", "env"] * 2 + ["model"]
        pos = len(traj.prompt_ids)
        for seg in traj.segments:
            n = len(seg.token_ids)
            expected = 1.0 if seg.kind == "model" else 0.0
            assert bool((batch.loss_mask_BT[row, pos : pos + n] == expected).all())
            if seg.kind == "env":
                assert bool((batch.versions_BT[row, pos : pos + n] == -1).all())
            pos += n
        _assert_engine_saw_these_ids(traj, model_dir, {0: model_dir})


async def _decoding_started(url: str, min_live: int = 1, min_steps: int = 0) -> None:
    """Wait until the server has `min_live` requests in flight and then made `min_steps` more
    forward steps (so they have tokens under the current weights)."""
    async with httpx.AsyncClient() as client:
        start = None
        while True:
            info = (await client.get(url + "/get_server_info")).json()
            steps = _stats(info)["forward_steps"]
            if start is None and info.get("num_live_requests", 0) >= min_live:
                start = steps
            if start is not None and steps >= start + min_steps:
                return
            await asyncio.sleep(0.01)


def _stats(info: dict) -> dict:
    return info["stats"]


@pytest.mark.timing
async def test_partial_rollout_over_http_across_a_weight_update(
    server, tokenizer, model_dir, tmp_path
):
    new_dir = perturbed_weights(model_dir, tmp_path / "v1")
    engine = SGLangEngine([server.url])
    try:
        # The update must land while the turns still decode: on a loaded machine the server
        # process can decode for a while before this process is scheduled to send it, so the
        # turns are long (the update interrupts them after a few steps; the rest is quick).
        mgr = _manager(engine, tokenizer, max_new_tokens_per_turn=1024)
        collecting = asyncio.create_task(mgr.collect([{"id": "p", "turns": 1}]))
        await _decoding_started(server.url, min_live=2, min_steps=4)  # tokens under version 0
        await mgr.update_weights(new_dir, version=1)
        result = await collecting
        for traj in result.trajectories:
            versions = traj.versions
            assert versions[0] == 0 and versions[-1] == 1, versions
            assert len(traj.segments) == 1  # the interrupted turn continued in place
            _assert_engine_saw_these_ids(traj, model_dir, {0: model_dir, 1: new_dir})
        assert result.metrics["rollout/aborted_generations"] >= 2
    finally:
        # Later tests in this module expect the original weights.
        await engine.update_weights(model_dir, version=2)
        await engine.close()


async def _served_requests(url: str) -> int:
    async with httpx.AsyncClient() as client:
        return int(_stats((await client.get(url + "/get_server_info")).json())["requests"])


@pytest.mark.parametrize(
    ("mode", "update_mode"),
    [("abort", "disk"), ("in_place", "disk"), ("retract", "disk"), ("in_place", "nccl")],
)
async def test_training_pause_follows_engine_pause_mode(
    server, tokenizer, model_dir, tmp_path, mode, update_mode
):
    """engine.pause_mode through RolloutManager.update_weights with long generations in flight.
    abort: each is aborted and resumed as a second request. in_place / retract: the server keeps
    it paused through the disk load (no flush asked under in_place: 0.5.23 would fail the
    update), and it answers once with per-token version spans. Versions: k before, k+1 after;
    max_version_lag masking and the staleness report read them. nccl: the same over a bucketed
    gloo broadcast inside an update session, the manager's pause kept (no second pause)."""
    new_dir = perturbed_weights(model_dir, tmp_path / "v1")
    engine = SGLangEngine([server.url], pause_mode=mode, update_mode=update_mode)
    await engine.start()
    k = engine.weight_version  # earlier tests in this module moved the server's version
    try:
        mgr = _manager(engine, tokenizer, max_new_tokens_per_turn=160)
        requests_before = await _served_requests(server.url)
        collecting = asyncio.create_task(mgr.collect([{"id": "m", "turns": 1}]))
        await _decoding_started(server.url, min_live=2, min_steps=4)  # tokens under version k
        await mgr.update_weights(new_dir, version=k + 1)
        result = await collecting
        requests = await _served_requests(server.url) - requests_before
    finally:
        await engine.update_weights(model_dir, version=k + 2)  # later tests: original weights
        await engine.close()
    trajs = result.trajectories
    assert len(trajs) == 2
    kept = mode != "abort"
    assert requests == (2 if kept else 4), requests  # kept: one request per trajectory
    assert (result.metrics["rollout/aborted_generations"] == 0) == kept
    assert result.metrics["rollout/mixed_version_trajectories"] == 2
    assert result.metrics["rollout/staleness_max"] == 1  # read from the oldest token, at k
    batch = flatten(trajs, [1.0, -1.0], pad_id=0)
    fresh = stale_token_mask(batch.versions_BT, batch.loss_mask_BT, k + 1, max_lag=0)
    for row, traj in enumerate(trajs):
        versions = traj.versions
        assert versions[0] == k and versions[-1] == k + 1 and versions == sorted(versions)
        assert len(traj.segments) == 1
        assert int(fresh[row].sum()) == versions.count(k + 1)  # lag 0 masks the k tokens
        refs = {k: model_dir} if kept else {k: model_dir, k + 1: new_dir}
        # Kept requests continue over their old KV cache, so only the k tokens match a plain
        # forward; resumed ones are recomputed from their ids, so every token does.
        _assert_engine_saw_these_ids(traj, model_dir, refs)


async def test_kept_pause_restarts_a_trajectory_the_update_made_stale(server, tokenizer, model_dir):
    """in_place with max_staleness_steps=0: the kept generation finishes across the update,
    then restarts from its prompt (as an aborted one would), so the group stays whole."""
    engine = SGLangEngine([server.url], pause_mode="in_place")
    await engine.start()
    k = engine.weight_version
    try:
        mgr = _manager(engine, tokenizer, max_new_tokens_per_turn=96, max_staleness_steps=0)
        collecting = asyncio.create_task(mgr.collect([{"id": "s", "turns": 1}]))
        await _decoding_started(server.url, min_live=2, min_steps=4)
        await mgr.update_weights(model_dir, version=k + 1)
        result = await collecting
    finally:
        await engine.close()
    assert [len(g) for g in result.groups] == [2]
    assert result.metrics["rollout/restarted_stale"] == 2
    assert result.metrics["rollout/aborted_generations"] == 0
    for traj in result.trajectories:
        assert set(traj.versions) == {k + 1}


@pytest.mark.slow
async def test_killed_worker_mid_rollout_resumes_on_the_survivor(tokenizer, model_dir):
    victim: ServerProcess = launch(model_path=model_dir, extra_args=SERVER_ARGS)
    survivor: ServerProcess = launch(model_path=model_dir, extra_args=SERVER_ARGS)
    port = victim.url.rsplit(":", 1)[1]
    engine = SGLangEngine([victim.url, survivor.url], down_cooldown_s=0.5)
    try:
        mgr = _manager(engine, tokenizer, max_new_tokens_per_turn=48)
        tasks = [{"id": f"k{i}", "turns": 2} for i in range(4)]
        collecting = asyncio.create_task(mgr.collect(tasks))
        await _decoding_started(victim.url)
        victim.kill()  # SIGKILL mid-generation: its in-flight requests never answer
        result = await asyncio.wait_for(collecting, timeout=300)

        trajs = result.trajectories
        assert len(trajs) == 8  # the step completed: every sample is accounted for
        for traj in trajs:
            assert traj.status in (Status.COMPLETE, Status.ERROR)
            if traj.status == Status.ERROR:
                assert traj.error and traj.reward is None
            else:  # resumed on the survivor from the ids it had; the ids are still exact
                _assert_engine_saw_these_ids(traj, model_dir, {0: model_dir})
        assert sum(t.status == Status.COMPLETE for t in trajs) >= 1

        # The worker comes back on its port and takes its share of new trajectories again.
        revived = launch(model_path=model_dir, port=int(port), extra_args=SERVER_ARGS)
        try:
            await asyncio.sleep(0.6)  # past the engine's cooldown for the dead worker
            again = await mgr.collect([{"id": f"r{i}", "turns": 1} for i in range(6)])
            assert all(t.status == Status.COMPLETE for t in again.trajectories)
            assert await _served_requests(revived.url) > 0

            # With every worker dead the step still completes: all errors, none scored.
            revived.kill()
            survivor.kill()
            dead = await asyncio.wait_for(mgr.collect([{"id": "d", "turns": 1}]), timeout=120)
            for traj in dead.trajectories:
                assert traj.status == Status.ERROR and traj.info["error_kind"] == "engine"
                assert traj.reward is None and "EngineUnavailable" in traj.error
        finally:
            revived.stop()
    finally:
        await engine.close()
        victim.stop()
        survivor.stop()
