"""SGLangEngine over real HTTP against `python -m gspo_agents.serve` subprocesses."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
import torch
from engine_helpers import (
    TOL,
    assert_learner_logprobs,
    free_port,
    launch_tiny,
    model_version,
    server_info,
    wait_steps,
)

from gspo_agents.logprobs import token_logprobs
from gspo_agents.models import load_model
from gspo_agents.rollout.engine import (
    Engine,
    EngineError,
    EngineRequestError,
    EngineUnavailable,
    SamplingParams,
)
from gspo_agents.rollout.sglang_engine import (
    SGLangEngine,
    parse_generation,
    rank_workers,
    route_key_of,
    sampling_json,
)
from gspo_agents.serve import ServerProcess, launch

pytest_plugins = ["engine_fixtures"]


@pytest.fixture
async def engine(server):
    eng = SGLangEngine([server.url], connect_timeout_s=5.0)
    yield eng
    await eng.close()


# --- pure functions --------------------------------------------------------------------------


def test_route_key_strips_the_managers_uuid_suffix():
    u = uuid.uuid4().hex
    assert route_key_of(f"task7-s3-{u}") == "task7-s3"
    assert route_key_of("traj-42") == "traj-42"
    assert route_key_of(u) == u


def test_sampling_is_sent_explicitly():
    params = sampling_json(SamplingParams(max_new_tokens=5, temperature=0.5, stop_token_ids=(2,)))
    assert params["temperature"] == 0.5 and params["top_p"] == 1.0 and params["top_k"] == -1
    assert params["max_new_tokens"] == 5 and params["stop_token_ids"] == [2]
    assert "sampling_seed" not in params


def test_parse_generation_tolerates_shape_drift():
    body = {
        "meta_info": {
            "finish_reason": None,
            "weight_version": "default",
            "output_token_logprobs": [[-1.5, 7, None], [-0.5, 9, "x"]],
        }
    }
    gen = parse_generation(body, fallback_version=3, max_new_tokens=10)
    assert gen.token_ids == [7, 9] and gen.logprobs == [-1.5, -0.5]
    assert gen.finish_reason == "abort" and gen.weight_version == 3
    body["meta_info"]["finish_reason"] = {"type": "stop", "matched": 9}
    body["meta_info"]["weight_version"] = "4"
    gen = parse_generation(body, 3, 10)
    assert gen.finish_reason == "stop" and gen.meta["matched"] == 9 and gen.weight_version == 4


def test_a_malformed_logprob_list_is_an_engine_error_naming_it():
    for pairs in ([[-1.5]], [[-1.5, "seven", None]], [None], 5):
        body = {"meta_info": {"finish_reason": "stop", "output_token_logprobs": pairs}}
        with pytest.raises(EngineError, match="malformed meta_info.output_token_logprobs"):
            parse_generation(body, 0, 10)


@pytest.mark.parametrize("decoder", ["orjson", "json"])
def test_answers_decode_alike_with_or_without_orjson(monkeypatch, decoder):
    """orjson decodes /generate answers where it is installed; what it refuses (NaN, Infinity,
    which Python's json writes) and every answer where it is missing goes through json."""
    import gspo_agents.rollout.sglang_wire as wire

    if decoder == "json":
        monkeypatch.setattr(wire, "orjson", None)
    raw = b'{"meta_info":{"output_token_logprobs":[[-1.5,7,null],[-Infinity,9,null]]}}'
    gen = parse_generation(wire.json_bytes("w/generate", raw), 0, 10)
    assert gen.token_ids == [7, 9] and gen.logprobs == [-1.5, float("-inf")]
    assert wire.loads(b'{"a":[1,2.5,"\\u00e9"]}') == {"a": [1, 2.5, "\u00e9"]}
    with pytest.raises(EngineError, match="non-JSON answer from w/generate: <html>"):
        wire.json_bytes("w/generate", b"<html>502</html>")


# --- one worker ------------------------------------------------------------------------------


async def test_generate_over_http_matches_learner_logprobs(engine, reference):
    assert isinstance(engine, Engine)
    prompt = [1, 60, 61]
    gen = await engine.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.8), "a-1")
    assert gen.finish_reason in ("stop", "length") and len(gen.token_ids) > 0
    assert gen.weight_version == engine.weight_version == 0
    assert_learner_logprobs(reference, prompt, gen, 0.8)


async def test_concurrent_generates_are_batched_by_the_server(engine, server, reference):
    await engine.pause()
    before = (await server_info(server.url))["stats"]["requests"]
    prompts = [[1, 100 + i, 200 + i] for i in range(32)]
    tasks = [
        asyncio.create_task(engine.generate(p, SamplingParams(max_new_tokens=6), f"c{i}"))
        for i, p in enumerate(prompts)
    ]
    while (await server_info(server.url))["stats"]["requests"] < before + 32:
        await asyncio.sleep(0.02)
    await engine.resume()
    gens = await asyncio.gather(*tasks)
    assert (await server_info(server.url))["stats"]["max_running"] >= 32
    for p, g in zip(prompts[:4], gens, strict=False):
        assert_learner_logprobs(reference, p, g)


async def test_abort_returns_partial_tokens(engine, server, reference):
    prompt = [1, 70]
    task = asyncio.create_task(engine.generate(prompt, SamplingParams(max_new_tokens=3000), "ab"))
    await wait_steps(server.url, 5)
    await engine.abort("ab")
    gen = await task
    if gen.finish_reason != "stop":
        assert gen.finish_reason == "abort" and 0 < len(gen.token_ids) < 3000
    assert_learner_logprobs(reference, prompt, gen)


async def test_pause_and_resume(engine, server):
    running = asyncio.create_task(engine.generate([1, 5], SamplingParams(max_new_tokens=3000), "p"))
    await wait_steps(server.url, 3)
    await engine.pause()
    assert (await running).finish_reason in ("abort", "stop")
    held = asyncio.create_task(engine.generate([1, 5], SamplingParams(max_new_tokens=3), "q"))
    await asyncio.sleep(0.3)
    assert not held.done()
    await engine.resume()
    assert (await held).finish_reason in ("length", "stop")


async def test_cancelled_generate_is_aborted_server_side(engine, server):
    # A sampled stop token can end a request before the cancel lands (cancel() on a finished
    # task is a no-op): then try a new request; 5 in a row ending early would be a real bug.
    for _ in range(5):
        task = asyncio.create_task(
            engine.generate([1, 6], SamplingParams(max_new_tokens=3000), "x")
        )
        await wait_steps(server.url, 3, task)
        if not task.done():
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):
        if (await server_info(server.url))["num_live_requests"] == 0:
            break
        await asyncio.sleep(0.02)
    assert (await server_info(server.url))["num_live_requests"] == 0


async def test_update_weights_from_disk_changes_version_and_logprobs(
    engine, tiny_path, reference, tmp_path
):
    torch.manual_seed(2)
    new_model = load_model(tiny_path)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    new_model.save_pretrained(tmp_path)
    prompt = [1, 33, 44]
    try:
        await engine.pause()
        await engine.update_weights(str(tmp_path), 9)
        await engine.resume()
        assert engine.weight_version == 9
        gen = await engine.generate(prompt, SamplingParams(max_new_tokens=8), "u")
        assert gen.weight_version == 9
        assert_learner_logprobs(new_model, prompt, gen)
        with pytest.raises(AssertionError):
            assert_learner_logprobs(reference, prompt, gen)
    finally:
        await engine.update_weights(tiny_path, 0)


async def test_request_errors_are_not_retried(engine):
    with pytest.raises(EngineRequestError, match="context length"):
        await engine.generate([1, 2], SamplingParams(max_new_tokens=100_000), "too-long")
    with pytest.raises(EngineRequestError, match="failed to load"):
        await engine.update_weights("/nonexistent/checkpoint", 1)


async def set_version_behind_the_engines_back(url: str, tiny_path: str, version: str) -> None:
    """What a crash and restart looks like from outside: the boot weights and version."""
    async with httpx.AsyncClient(timeout=60) as c:
        resp = await c.post(
            url + "/update_weights_from_disk",
            json={"model_path": tiny_path, "weight_version": version},
        )
        assert resp.json()["success"]


async def test_an_answer_at_a_stale_version_is_discarded_and_the_update_replayed_first(
    engine, server, tiny_path
):
    await engine.update_weights(tiny_path, 3)
    try:
        await set_version_behind_the_engines_back(server.url, tiny_path, "0")
        before = (await server_info(server.url))["stats"]["requests"]
        gen = await engine.generate([1, 4], SamplingParams(max_new_tokens=2), "stale")
        assert gen.weight_version == 3  # never the version-0 answer
        assert await model_version(server.url) == "3"
        assert (await server_info(server.url))["stats"]["requests"] == before + 2  # one discarded

        await set_version_behind_the_engines_back(server.url, tiny_path, "0")
        assert await engine.worker_health() == {server.url: True}  # replays before it returns
        assert await model_version(server.url) == "3"
    finally:
        await engine.update_weights(tiny_path, 0)


@pytest.mark.timeout(60)
async def test_unreachable_url_fails_clearly_within_seconds():
    url = f"http://127.0.0.1:{free_port()}"
    eng = SGLangEngine([url], connect_timeout_s=1.0, max_attempts=2, backoff_s=0.05)
    try:
        with pytest.raises(EngineUnavailable, match=url.split("//")[1]):
            await eng.generate([1, 2], SamplingParams(max_new_tokens=2), "r")
        assert await eng.health() is False
        with pytest.raises(ValueError, match="at least one URL"):
            SGLangEngine([])
    finally:
        await eng.close()


# --- several workers -------------------------------------------------------------------------


def restart(proc: ServerProcess, tiny_path: str, port: int) -> ServerProcess:
    """Crash the worker and start a fresh one on the same port: it boots at version 0."""
    proc.kill()
    return launch_tiny(tiny_path, port)


@pytest.mark.slow
async def test_two_workers_sticky_routing_fan_out_and_failover(server, tiny_path, tmp_path):
    port = free_port()
    second = launch_tiny(tiny_path, port)
    eng = SGLangEngine([server.url, second.url], down_cooldown_s=0.5, backoff_s=0.05)
    sample = SamplingParams(max_new_tokens=2)

    async def gen(key: str):
        return await eng.generate([1, 3], sample, f"{key}-{uuid.uuid4().hex}")

    async def served_by_second(key: str) -> bool:
        before = (await server_info(second.url))["stats"]["requests"]
        assert (await gen(key)).weight_version == eng.weight_version
        return (await server_info(second.url))["stats"]["requests"] == before + 1

    try:
        await eng.start()
        assert eng.worker_urls == [server.url, second.url]
        chosen = {k: rank_workers(k, eng.worker_urls)[0] for k in (f"traj{i}" for i in range(16))}
        assert set(chosen.values()) == {server.url, second.url}  # keys spread over both
        mine = [k for k, url in chosen.items() if url == second.url]
        assert all([await served_by_second(k) for k in mine])  # sticky: each on its worker

        # Control calls reach every worker.
        load_model(tiny_path).save_pretrained(tmp_path)
        await eng.update_weights(str(tmp_path), 4)
        assert [await model_version(u) for u in (server.url, second.url)] == ["4", "4"]

        # A dead worker's trajectories fail over to the survivor; nothing raises.
        second.kill()
        assert {g.weight_version for g in await asyncio.gather(*map(gen, mine))} == {4}
        assert await eng.health()  # one worker is enough to serve
        assert (await eng.worker_health())[second.url] is False

        # It misses update 5. Passing a health check brings it back, with 5 replayed first.
        await eng.update_weights(tiny_path, 5)
        second = launch_tiny(tiny_path, port)
        assert (
            await model_version(second.url) == "default"
        )  # its boot weights, as SGLang 0.5.23 boots
        assert await eng.worker_health() == {server.url: True, second.url: True}
        assert await model_version(second.url) == "5"
        assert await served_by_second(mine[0])  # back in rotation, sticky again

        # Restarted between two updates, unnoticed: the health check sees its boot version.
        second = restart(second, tiny_path, port)
        assert (await eng.worker_health())[second.url] is True
        assert await model_version(second.url) == "5"
        assert await served_by_second(mine[0])

        # Restarted unnoticed again, and this time requests reach it first: whether they hit
        # the dead connection (failover) or the new process (boot-version answers, discarded),
        # every caller gets version 5, and the worker is in sync again before it serves.
        second = restart(second, tiny_path, port)
        assert {g.weight_version for g in await asyncio.gather(*map(gen, mine))} == {5}
        assert (await eng.worker_health())[second.url] is True
        assert await model_version(second.url) == "5"
        assert await served_by_second(mine[0])
    finally:
        second.stop()
        await eng.close()
        async with httpx.AsyncClient() as c:
            await c.post(
                server.url + "/update_weights_from_disk",
                json={"model_path": tiny_path, "weight_version": "0"},
            )


# --- distributed weight update ---------------------------------------------------------------


async def test_update_weights_from_distributed_over_gloo(engine, server, tiny_path, reference):
    """The NCCL protocol, run with the gloo backend so it runs on this CPU machine."""
    new_model = load_model(tiny_path)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    named = list(new_model.state_dict().items())
    await engine.init_weights_update_group(
        "127.0.0.1", free_port(), group_name="gloo_sync", backend="gloo", timeout_s=60
    )
    try:
        await engine.update_weights_from_distributed(named, 11, group_name="gloo_sync")
        assert engine.weight_version == 11
        prompt = [1, 12, 13]
        gen = await engine.generate(prompt, SamplingParams(max_new_tokens=6), "d")
        assert gen.weight_version == 11
        assert_learner_logprobs(new_model, prompt, gen)

        # A broadcast cannot be replayed to a worker found at another version: it stays out of
        # rotation, and with no other worker the request fails, naming the version.
        await set_version_behind_the_engines_back(server.url, tiny_path, "0")
        with pytest.raises(EngineUnavailable, match="at weight version 11"):
            await engine.generate(prompt, SamplingParams(max_new_tokens=2), "d2")
    finally:
        await engine.update_weights(tiny_path, 0)


@pytest.mark.gpu
@pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason="NCCL weight sync needs 2 CUDA devices: the learner rank and the engine rank may not "
    "share a GPU (NCCL rejects duplicate devices in one communicator)",
)
async def test_update_weights_from_distributed_over_nccl(tiny_path):
    with launch(model_path=tiny_path, env={"CUDA_VISIBLE_DEVICES": "1"}) as srv:
        eng = SGLangEngine([srv.url])
        try:
            new_model = load_model(tiny_path).to("cuda:0")
            with torch.no_grad():
                for p in new_model.parameters():
                    p.mul_(1.1)
            await eng.init_weights_update_group("127.0.0.1", free_port(), backend="nccl")
            await eng.update_weights_from_distributed(list(new_model.state_dict().items()), 2)
            gen = await eng.generate([1, 12, 13], SamplingParams(max_new_tokens=6), "g")
            assert gen.weight_version == 2
            assert_learner_logprobs(new_model.cpu(), [1, 12, 13], gen)
        finally:
            await eng.close()


# --- weight sync end to end ------------------------------------------------------------------


async def _trajectories(eng, prompts, version_tag: str):
    from gspo_agents.trajectory import Trajectory

    trajs = []
    for i, prompt in enumerate(prompts):
        traj = Trajectory(prompt_ids=prompt)
        gen = await eng.generate(prompt, SamplingParams(max_new_tokens=8), f"{version_tag}{i}")
        traj.append_model(gen.token_ids, gen.logprobs, gen.weight_version)
        traj.close_turn()
        trajs.append(traj)
    return trajs


@pytest.mark.slow
async def test_learner_export_then_update_weights_from_disk_end_to_end(engine, tiny_path, tmp_path):
    """Learner step → export_hf → update_weights_from_disk over HTTP → the server's log-probs
    equal the updated learner's log-probs (fp32, 1e-4)."""
    from gspo_agents.learner import Learner, LearnerConfig
    from gspo_agents.trajectory import flatten

    prompts = [[1, 40 + i, 50 + i] for i in range(4)]
    learner = Learner(tiny_path, LearnerConfig(algorithm="grpo", lr=1e-2, num_minibatches=1))
    try:
        before = await _trajectories(engine, prompts, "b")
        batch = flatten(before, [1.0, -1.0, 1.0, -1.0], learner.pad_token_id)
        learner.update(batch)
        out = learner.export_hf(str(tmp_path / "v1"))
        await engine.pause()
        await engine.update_weights(out, 1)
        await engine.resume()
        after = await _trajectories(engine, prompts, "a")
        assert all(t.versions == [1] * t.num_model_tokens for t in after)
        new_batch = flatten(after, [0.0] * len(after), learner.pad_token_id)
        learner_BT = learner.compute_logprobs(new_batch)
    finally:
        learner.close()
        await engine.update_weights(tiny_path, 0)
    mask = new_batch.loss_mask_BT.bool()
    gap = (learner_BT[mask] - new_batch.old_logprobs_BT[mask]).abs().max().item()
    assert gap < TOL, gap
    moved = (learner_BT[mask] - old_policy_logprobs(tiny_path, after)[mask]).abs().max().item()
    assert moved > 1e-3  # the update really changed the policy the server samples from


def old_policy_logprobs(path, trajs):
    from gspo_agents.trajectory import flatten

    model = load_model(path)
    batch = flatten(trajs, [0.0] * len(trajs), 0)
    with torch.no_grad():
        logits = model(batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
    return token_logprobs(logits, batch.input_ids_BT)
