"""SGLangEngine against a server that behaves like SGLang 0.5.23 where the client once got it wrong.

`python -m gspo_agents.serve` follows SGLang 0.5.23 in these respects (docs/sglang.md): /server_info
keeps the launch weight_version and /model_info has the current one; /generate blocks while
paused; /health hangs while paused (it generates a token), up to its timeout; seeds are reported
as honoured only under --enable-deterministic-inference. Each test below failed on the client
before the fix it names (issue 15, findings 1, 3, 4).
"""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
import torch
from engine_helpers import free_port, model_version, server_info, wait_steps

from gspo_agents.models import load_model
from gspo_agents.rollout.engine import SamplingParams
from gspo_agents.rollout.sglang_engine import SGLangEngine

pytest_plugins = ["engine_fixtures"]


@pytest.fixture
async def engine(server):
    eng = SGLangEngine([server.url], connect_timeout_s=5.0)
    yield eng
    await eng.close()


def _perturbed_state(tiny_path: str, seed: int) -> list[tuple[str, torch.Tensor]]:
    model = load_model(tiny_path)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return list(model.state_dict().items())


async def test_current_weight_version_is_read_from_model_info(engine, server, tiny_path):
    """Finding 1: /server_info reports the launch version forever; reading it there made every
    health check after an update reload the weights (and one worker fail outright)."""
    await engine.update_weights(tiny_path, 3)
    try:
        assert (await server_info(server.url))["weight_version"] == "default"  # launch argument
        assert await model_version(server.url) == "3"
        updates = (await server_info(server.url))["stats"]["weight_updates"]
        assert await engine.worker_health() == {server.url: True}
        assert await engine.health()
        # No reload: the health checks saw the worker at the engine's version.
        assert (await server_info(server.url))["stats"]["weight_updates"] == updates
        gen = await engine.generate([1, 9], SamplingParams(max_new_tokens=2), "v3")
        assert gen.weight_version == 3
    finally:
        await engine.update_weights(tiny_path, 0)


async def test_nccl_update_pauses_in_flight_generation_then_continues(engine, server, tiny_path):
    """Finding 3: unpaused, the server waits for in-flight generations before it receives the
    broadcast. Paused ("abort"), the long request returns its tokens so far under the old
    weights, the update lands, and generation continues (the server is not left paused)."""
    with pytest.raises(ValueError, match="retract"):
        SGLangEngine([server.url], pause_mode="pause")  # type: ignore[arg-type]
    await engine.init_weights_update_group(
        "127.0.0.1", free_port(), group_name="parity_sync", backend="gloo", timeout_s=60
    )
    named = _perturbed_state(tiny_path, 5)  # before the long request: a shorter window
    # The tiny model can sample EOS before the pause lands (finish "stop", the update then ran
    # unpaused): try again with a new version; 5 in a row ending early would be a real bug.
    long, before = None, 0  # the version the server holds before each try's update
    try:
        for version in range(8, 13):
            long = asyncio.create_task(
                engine.generate([1, 7], SamplingParams(max_new_tokens=3000), f"long-{version}")
            )
            await wait_steps(server.url, 3, long)
            if long.done():
                continue
            await engine.update_weights_from_distributed(named, version, group_name="parity_sync")
            partial = await long
            if partial.finish_reason != "stop":
                break
            before = version
        assert partial.finish_reason == "abort" and 0 < len(partial.token_ids) < 3000
        assert partial.weight_version == before  # its tokens are under the old weights
        assert await engine.worker_health() == {server.url: True}  # `version` on /model_info
        gen = await engine.generate([1, 7], SamplingParams(max_new_tokens=2), "after-nccl")
        assert gen.weight_version == version
    finally:
        if long is not None:
            long.cancel()
        await engine.update_weights(tiny_path, 0)


async def test_seeds_warn_once_when_the_server_is_not_deterministic(engine, server, caplog):
    """Finding 4a: sampling_seed has no effect without --enable-deterministic-inference."""
    seeded = SamplingParams(max_new_tokens=2, seed=7)
    with caplog.at_level(logging.WARNING, logger="gspo_agents.rollout.sglang_engine"):
        await engine.generate([1, 3], SamplingParams(max_new_tokens=2), "unseeded")
        assert "deterministic" not in caplog.text
        await engine.generate([1, 3], seeded, "seeded-1")
        await engine.generate([1, 3], seeded, "seeded-2")
    warnings = [r for r in caplog.records if "--enable-deterministic-inference" in r.message]
    assert len(warnings) == 1 and server.url in warnings[0].message


async def test_a_paused_worker_is_alive_though_its_health_check_hangs(engine, server):
    """Finding 4b: /health hangs while paused (SGLang: up to 20 s, then 503); the client's 5 s
    probe took that for a dead worker."""
    await engine.pause()
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as raw:
        try:
            hanging = asyncio.create_task(raw.get("/health"))
            await asyncio.sleep(1.0)
            assert not hanging.done()  # as SGLang's: no token is generated while paused
            assert (await raw.get("/ready")).status_code == 503
            health = await asyncio.wait_for(engine.worker_health(), timeout=10)
            assert health == {server.url: True}
            held = asyncio.create_task(
                engine.generate([1, 4], SamplingParams(max_new_tokens=2), "held")
            )
            await asyncio.sleep(0.3)
            assert not held.done()  # /generate blocks while paused
        finally:
            await engine.resume()
        assert (await hanging).status_code == 200
        assert (await held).finish_reason in ("length", "stop")
        assert (await raw.get("/ready")).status_code == 200
    assert await engine.worker_health() == {server.url: True}


async def test_an_older_server_is_read_through_the_older_names_found_once():
    """Servers before /model_info and /server_info existed answer 404 there: the client falls
    back to /get_model_info and /get_server_info, and tries the newer names only once."""
    import collections

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    hits: collections.Counter[str] = collections.Counter()

    def answer(body: dict):
        async def endpoint(request: Request) -> JSONResponse:
            return JSONResponse(body)

        return endpoint

    app = Starlette(
        routes=[
            Route("/get_server_info", answer({"weight_version": "0", "tp_size": 1})),
            Route("/get_model_info", answer({"model_path": "m", "weight_version": "5"})),
            Route("/health", answer({})),
        ]
    )

    async def count(scope, receive, send):
        if scope["type"] == "http":
            hits[scope["path"]] += 1
        await app(scope, receive, send)

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(count, port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    eng = SGLangEngine([f"http://127.0.0.1:{port}"])
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        await eng.start()
        assert eng.weight_version == 5  # the current version, not the launch "0"
        for _ in range(3):
            assert await eng.health()
        assert hits["/model_info"] == 1 and hits["/server_info"] == 1  # found once
        assert hits["/get_model_info"] == 4 and hits["/get_server_info"] == 1
    finally:
        await eng.close()
        server.should_exit = True
        await serving
