"""RolloutManager over the real in-process LocalEngine with the tiny model.

The HTTP path (serve + SGLangEngine) and worker faults are in test_manager_http.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from test_manager_support import (
    CounterEnv,
    forward_logprobs,
    model_positions,
    perturbed_weights,
    tiny_model_dir,
    tiny_tokenizer,
)

from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.trajectory import Status, flatten


@pytest.fixture(scope="module")
def model_dir() -> str:
    return tiny_model_dir()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def engine(model_dir):
    eng = LocalEngine(model_dir, max_batch_size=16, seed=0)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture
def fresh_engine(model_dir):
    """An engine of its own, for tests that change its weights or close it."""
    eng = LocalEngine(model_dir, max_batch_size=16, seed=1)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture(autouse=True)
def _gauges():
    CounterEnv.reset_gauges()
    yield
    CounterEnv.reset_gauges()


def _manager(engine, tokenizer, env_max_turns: int = 8, **cfg) -> RolloutManager:
    cfg = {"num_samples_per_task": 2, "max_new_tokens_per_turn": 12, **cfg}
    return RolloutManager(
        engine, lambda: CounterEnv(max_turns=env_max_turns), tokenizer, RolloutConfig(**cfg)
    )


async def test_multi_turn_trajectories_are_exactly_what_the_engine_saw(
    engine, tokenizer, model_dir
):
    mgr = _manager(engine, tokenizer)
    result = await mgr.collect([{"id": "a", "turns": 3}, {"id": "b", "turns": 2}])
    assert [len(g) for g in result.groups] == [2, 2]
    for traj in result.trajectories:
        turns = traj.task_id == "a" and 3 or 2
        assert traj.status == Status.COMPLETE and traj.num_turns == turns
        assert [s.kind for s in traj.segments] == ["model", "env"] * (turns - 1) + ["model"]
        assert len(traj.turn_rewards) == turns and traj.reward in (0.0, 1.0)
        # Each env segment is the template's rendering of exactly the env's reply to that turn.
        for i, (model, env) in enumerate(
            zip(traj.segments[0::2], traj.segments[1::2], strict=False)
        ):
            said = mgr.chat.action_text(model.token_ids)
            reply = [{"role": "user", "content": f"Turn {i + 1} done ({len(said)} chars). Go on."}]
            assert env.token_ids == mgr.chat.observation_ids(reply, model.token_ids)
        # The engine's log-probs are those of the assembled sequence under the model: the ids we
        # built are byte for byte the ids the engine continued from.
        reference = forward_logprobs(model_dir, traj.token_ids)
        for pos, _, lp, version in model_positions(traj):
            assert version == 0
            assert lp == pytest.approx(reference[pos], abs=1e-4)
    batch = flatten(result.trajectories, [0.0] * 4, pad_id=0)
    for row, traj in enumerate(result.trajectories):
        assert int(batch.loss_mask_BT[row].sum()) == traj.num_model_tokens
        pos = len(traj.prompt_ids)
        for seg in traj.segments:
            mask = batch.loss_mask_BT[row, pos : pos + len(seg.token_ids)]
            assert bool((mask == (1.0 if seg.kind == "model" else 0.0)).all())
            pos += len(seg.token_ids)
    m = result.metrics
    assert m["rollout/complete"] == 4 and m["rollout/turns"] == 10 and m["rollout/env_steps"] == 10


async def test_turn_budget_truncates_with_the_envs_reward(engine, tokenizer):
    mgr = _manager(engine, tokenizer, max_turns=2)
    result = await mgr.collect([{"id": "long", "turns": 5}])
    for traj in result.trajectories:
        assert traj.status == Status.TRUNCATED and traj.info["truncated_by"] == "turns"
        assert traj.num_turns == 2 and traj.reward == 0.0 and traj.trainable
    assert result.metrics["rollout/truncated_by_turns"] == 2


async def test_envs_own_turn_limit_applies_without_a_manager_limit(engine, tokenizer):
    mgr = _manager(engine, tokenizer, env_max_turns=1)
    result = await mgr.collect([{"id": "long", "turns": 4}])
    assert all(t.status == Status.TRUNCATED and t.num_turns == 1 for t in result.trajectories)


async def test_context_budget_shrinks_the_last_turn_and_truncates(engine, tokenizer):
    probe = _manager(engine, tokenizer)
    env = CounterEnv()
    prompt_len = len(probe.chat.prompt_ids(env.reset(options={"task": {"id": "c", "turns": 5}})[0]))
    env.close()
    mgr = _manager(
        engine, tokenizer, max_new_tokens_per_turn=16, max_context_tokens=prompt_len + 10
    )
    result = await mgr.collect([{"id": "c", "turns": 5}])
    for traj in result.trajectories:
        assert traj.num_model_tokens == 10  # max_new_tokens shrank from 16 to what was left
        assert traj.num_tokens <= prompt_len + 10
        assert traj.status == Status.TRUNCATED and traj.info["truncated_by"] == "context"
    assert result.metrics["rollout/length_turn_frac"] == 1.0


async def test_prompt_longer_than_the_context_is_counted_not_scored(engine, tokenizer):
    mgr = _manager(engine, tokenizer, max_context_tokens=8)
    result = await mgr.collect([{"id": "too-long", "turns": 1}])
    for traj in result.trajectories:
        assert traj.status == Status.TRUNCATED and traj.info["truncated_by"] == "prompt"
        assert traj.reward is None and not traj.trainable and traj.num_model_tokens == 0
    assert result.metrics["rollout/truncated_by_prompt"] == 2


async def test_env_failures_are_errors_never_a_zero_reward(engine, tokenizer):
    mgr = _manager(engine, tokenizer)
    tasks = [
        {"id": "infra", "turns": 3, "infra_error_on_turn": 2},
        {"id": "bug", "turns": 3, "raise_on_turn": 1},
        {"id": "ok", "turns": 1},
        {"id": "no-sandbox", "turns": 1, "infra_error_on_reset": True},
    ]
    result = await mgr.collect(tasks)
    infra, bug, ok, no_sandbox = result.groups
    for traj in infra:
        assert traj.status == Status.ERROR and traj.reward is None and not traj.trainable
        assert "sandbox died on turn 2" in traj.error and traj.info["error_kind"] == "env_infra"
    for traj in bug:
        assert traj.status == Status.ERROR and "RuntimeError: env bug" in traj.error
    assert all(t.status == Status.COMPLETE for t in ok)
    for traj in no_sandbox:
        assert traj.status == Status.ERROR and "did not start" in traj.error
    m = result.metrics
    assert (m["rollout/error_env_infra"], m["rollout/error_env_exception"]) == (4, 2)
    assert m["rollout/error"] == 6 and m["rollout/complete"] == 2
    assert CounterEnv.live == 0  # every env was closed


async def test_engine_failure_marks_the_trajectory_error(fresh_engine, tokenizer):
    await fresh_engine.close()  # every generate now raises EngineError
    mgr = _manager(fresh_engine, tokenizer)
    result = await mgr.collect([{"id": "x", "turns": 2}])
    for traj in result.trajectories:
        assert traj.status == Status.ERROR and traj.info["error_kind"] == "engine"
        assert traj.reward is None and "closed" in traj.error
    assert result.metrics["rollout/error_engine"] == 2
    assert result.metrics["rollout/engine_retries"] == 2 * 3


async def test_trajectory_deadline_ends_a_stuck_episode(engine, tokenizer):
    mgr = _manager(engine, tokenizer, trajectory_timeout_s=1.0)
    # The env would sleep for an hour: only the deadline can end these trajectories.
    result = await mgr.collect([{"id": "slow", "turns": 2, "step_delay_s": 3600}])
    for traj in result.trajectories:
        assert traj.status == Status.ERROR and traj.info["error_kind"] == "timeout"
        assert traj.reward is None and "deadline" in traj.error
    assert result.metrics["rollout/error_timeout"] == 2
    assert CounterEnv.live == 0


async def test_live_trajectories_are_bounded(engine, tokenizer):
    mgr = _manager(engine, tokenizer, max_live_trajectories=3, max_new_tokens_per_turn=4)
    tasks = [{"id": str(i), "turns": 2, "step_delay_s": 0.05} for i in range(4)]
    result = await mgr.collect(tasks)
    assert len(result.trajectories) == 8
    assert CounterEnv.max_live == 3


async def _wait_for_decoding(engine: LocalEngine, steps: int) -> None:
    start = engine.stats.forward_steps
    while engine.stats.forward_steps < start + steps:
        await asyncio.sleep(0.005)


async def _collect_across_update(engine, tokenizer, weights: str, task: dict, **cfg):
    """Collect `task` (G=2, 96-token turns) with a weight update to version 1 mid-decode."""
    mgr = _manager(engine, tokenizer, max_new_tokens_per_turn=96, **cfg)
    collecting = asyncio.create_task(mgr.collect([task]))
    await _wait_for_decoding(engine, 6)
    await mgr.update_weights(weights, version=1)
    return mgr, await collecting


async def test_partial_rollout_resumes_under_new_weights(
    fresh_engine, tokenizer, model_dir, tmp_path
):
    new_dir = perturbed_weights(model_dir, tmp_path / "v1")
    task = {"id": "p", "turns": 1}
    mgr, result = await _collect_across_update(fresh_engine, tokenizer, new_dir, task)
    assert mgr.weight_version == 1 and result.metrics["rollout/aborted_generations"] >= 1
    assert result.metrics["rollout/mixed_version_trajectories"] == 2
    for traj in result.trajectories:
        assert traj.status in (Status.COMPLETE, Status.TRUNCATED)
        assert len(traj.segments) == 1  # one model turn, continued in place after the update
        versions = traj.versions
        assert versions[0] == 0 and versions[-1] == 1 and versions == sorted(versions)
        old_ref = forward_logprobs(model_dir, traj.token_ids)
        new_ref = forward_logprobs(new_dir, traj.token_ids)
        for pos, _, lp, version in model_positions(traj):
            expected = old_ref[pos] if version == 0 else new_ref[pos]
            assert lp == pytest.approx(expected, abs=1e-4), (pos, version)
        # The two policies really differ on the resumed tokens (the check above has teeth).
        resumed = [p for p, _, _, v in model_positions(traj) if v == 1]
        assert max(abs(old_ref[p] - new_ref[p]) for p in resumed) > 1e-2


@pytest.mark.parametrize("mode", ["in_place", "retract"])
async def test_kept_pause_modes_carry_one_request_through_the_update(
    model_dir, tokenizer, tmp_path, mode
):
    """engine.pause_mode=in_place / retract in training: the manager's pause keeps the running
    generations; each finishes as the one request it was, its tokens at 0 then at 1."""
    engine = LocalEngine(model_dir, max_batch_size=16, seed=1, pause_mode=mode)
    try:
        new_dir = perturbed_weights(model_dir, tmp_path / "v1")
        task = {"id": "k", "turns": 1}
        _, result = await _collect_across_update(engine, tokenizer, new_dir, task)
    finally:
        await engine.close()
    assert engine.stats.requests == 2  # one per trajectory: none was aborted and sent again
    assert result.metrics["rollout/aborted_generations"] == 0
    assert result.metrics["rollout/mixed_version_trajectories"] == 2
    for traj in result.trajectories:
        versions = traj.versions
        assert versions[0] == 0 and versions[-1] == 1 and versions == sorted(versions)
        old_ref = forward_logprobs(model_dir, traj.token_ids)
        for pos, _, lp, version in model_positions(traj):
            if version == 0:  # made before the update: the old weights' numbers
                assert lp == pytest.approx(old_ref[pos], abs=1e-4), pos


async def test_on_policy_bound_restarts_interrupted_trajectories(
    fresh_engine, tokenizer, model_dir
):
    task = {"id": "s", "turns": 2}
    _, result = await _collect_across_update(
        fresh_engine, tokenizer, model_dir, task, max_staleness_steps=0
    )
    assert [len(g) for g in result.groups] == [2]  # restarted, so the group stays whole
    assert result.metrics["rollout/restarted_stale"] >= 1
    assert result.metrics["rollout/dropped_stale"] >= 1
    for traj in result.trajectories:
        assert set(traj.versions) == {1}


async def test_async_prefetch_overlaps_training_and_drops_stale_batches(
    fresh_engine, tokenizer, model_dir
):
    mgr = _manager(fresh_engine, tokenizer, max_staleness_steps=1)
    tasks = [{"id": "q", "turns": 1}]
    mgr.start_prefetch(tasks)
    with pytest.raises(RuntimeError, match="max_staleness_steps=1"):
        mgr.start_prefetch(tasks)  # a second batch ahead could only come back stale
    steps_before = fresh_engine.stats.forward_steps
    await asyncio.to_thread(_fake_training_step, fresh_engine, steps_before)
    assert fresh_engine.stats.forward_steps > steps_before  # generation ran during "training"
    first = await mgr.next_batch()
    assert first.metrics["rollout/complete"] == 2

    # Trajectories finish their generation under version 0, then the learner moves on twice
    # while their env step is still running: at consumption they are two versions old.
    CounterEnv.release = asyncio.Event()
    mgr.start_prefetch(tasks)
    while CounterEnv.waiting < 2:  # both trajectories have generated and sit in env.step
        await asyncio.sleep(0.01)
    await mgr.update_weights(model_dir, version=1)
    await mgr.update_weights(model_dir, version=2)
    CounterEnv.release.set()
    stale = await mgr.next_batch()
    assert stale.groups == [] and stale.metrics["rollout/dropped_stale"] == 2

    CounterEnv.release = asyncio.Event()
    mgr.start_prefetch(tasks)
    while CounterEnv.waiting < 2:
        await asyncio.sleep(0.01)
    await mgr.update_weights(model_dir, version=3)
    CounterEnv.release.set()
    kept = await mgr.next_batch()
    assert len(kept.trajectories) == 2 and kept.metrics["rollout/staleness_max"] == 1
    await mgr.aclose()


def _fake_training_step(engine: LocalEngine, steps_before: int) -> None:
    """Stands in for learner.update in a thread: busy until the engine has made progress."""
    deadline = time.monotonic() + 60
    while engine.stats.forward_steps <= steps_before and time.monotonic() < deadline:
        time.sleep(0.01)


async def test_aclose_cancels_a_pending_prefetch(engine, tokenizer):
    mgr = _manager(engine, tokenizer)
    mgr.start_prefetch([{"id": "c", "turns": 2, "step_delay_s": 60}])
    await asyncio.sleep(0.05)
    await mgr.aclose()
    with pytest.raises(RuntimeError, match="start_prefetch"):
        await mgr.next_batch()
    await asyncio.sleep(0)
    assert CounterEnv.live == 0


async def test_cancelled_collect_closes_envs_and_frees_engine_requests(fresh_engine, tokenizer):
    mgr = _manager(fresh_engine, tokenizer, max_new_tokens_per_turn=96)
    collecting = asyncio.create_task(mgr.collect([{"id": "c", "turns": 3}]))
    await _wait_for_decoding(fresh_engine, 3)
    collecting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await collecting  # the cancellation reaches the caller, it is not swallowed
    assert CounterEnv.live == 0
    for _ in range(200):  # the engine frees aborted rows at its next step boundary
        if not fresh_engine.request_ids():
            break
        await asyncio.sleep(0.01)
    assert fresh_engine.request_ids() == []


async def test_failed_weight_update_resumes_generation_on_the_old_weights(
    fresh_engine, tokenizer, tmp_path
):
    mgr = _manager(fresh_engine, tokenizer, max_new_tokens_per_turn=96)
    collecting = asyncio.create_task(mgr.collect([{"id": "f", "turns": 1}]))
    await _wait_for_decoding(fresh_engine, 3)
    with pytest.raises(Exception, match="nothing-here"):
        await mgr.update_weights(str(tmp_path / "nothing-here"), version=1)
    result = await collecting  # the engine was resumed: the interrupted turns finish
    assert mgr.weight_version == 0
    for traj in result.trajectories:
        assert traj.status == Status.COMPLETE and set(traj.versions) == {0}


async def test_tokens_from_older_weights_than_loaded_are_flagged_and_dropped(
    fresh_engine, tokenizer, model_dir
):
    mgr = _manager(fresh_engine, tokenizer, max_staleness_steps=0)
    await mgr.update_weights(model_dir, version=1)
    # As a worker restarted from its original checkpoint would: it serves version 0 again.
    await fresh_engine.update_weights(model_dir, version=0)
    result = await mgr.collect([{"id": "old", "turns": 2}])
    assert result.groups == []  # nothing made by version 0 passes as on-policy for version 1
    assert result.metrics["rollout/behind_version_generations"] >= 2
    assert result.metrics["rollout/dropped_stale"] == 2 * 3  # each sample tried three times


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="num_samples_per_task"):
        RolloutConfig(num_samples_per_task=0)
    with pytest.raises(ValueError, match="temperature"):
        RolloutConfig(temperature=0.0)
    with pytest.raises(ValueError, match="max_turns"):
        RolloutConfig(max_turns=0)


def test_hydra_schema_is_the_managers_config_with_the_seed_from_the_trainer():
    from gspo_agents.config import RolloutConfig as RolloutSchema
    from gspo_agents.config import hydra_schema

    def defaults(cls) -> dict:
        return {f.name: f.default for f in dataclasses.fields(cls)}

    schema, record = defaults(RolloutSchema), defaults(RolloutConfig)
    assert schema.pop("seed") == "${trainer.seed}" and record.pop("seed") is None
    assert list(schema.items()) == list(record.items())  # same fields, order and defaults
    with pytest.raises(TypeError, match="seeed"):
        hydra_schema(RolloutConfig, seeed=1)


async def test_weight_versions_must_grow(engine, tokenizer, model_dir):
    mgr = _manager(engine, tokenizer)
    with pytest.raises(ValueError, match="must grow"):
        await mgr.update_weights(model_dir, version=0)
