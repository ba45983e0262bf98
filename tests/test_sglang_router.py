"""SGLangEngine behind the real SGLang router (sglang-router==0.3.2, Rust, CPU-installable) in
front of two `python -m gspo_agents.serve` workers.

The router runs `--policy manual`: it routes by the `X-SMG-Routing-Key` header, which the client
sets to the trajectory id on every /generate (docs/sglang.md). Without the header, 4 of 8
three-turn conversations moved between workers under cache_aware and 7 of 8 under manual
(issue 15, finding 2). The router does not fan control calls out: the client sends them to
every worker it discovers behind the router.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from engine_helpers import (
    assert_learner_logprobs,
    free_port,
    model_version,
    server_info,
    wait_steps,
)
from test_manager_support import perturbed_weights

from gspo_agents.models import load_model
from gspo_agents.rollout.engine import SamplingParams
from gspo_agents.rollout.sglang_engine import SGLangEngine
from gspo_agents.rollout.sglang_wire import ROUTER_HEALTH_ARGS
from gspo_agents.serve import launch

pytest_plugins = ["engine_fixtures"]

# Seeds take effect on these workers, as on SGLang launched with the flag: no warning expected.
# A paused worker's /health answers 503 after 1 s (SGLang: 20 s).
WORKER_ARGS = [
    "--num-threads",
    "1",
    "--enable-deterministic-inference",
    "--health-check-timeout",
    "1",
]


@pytest.fixture(scope="module")
def workers(tiny_path):
    first = launch(model_path=tiny_path, extra_args=WORKER_ARGS)
    try:
        second = launch(model_path=tiny_path, extra_args=WORKER_ARGS)
    except BaseException:
        first.stop()
        raise
    try:
        yield [first, second]
    finally:
        first.stop()
        second.stop()


@pytest.fixture(scope="module")
def router(workers):
    pytest.importorskip("sglang_router", reason="pip install sglang-router to test router mode")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sglang_router.launch_router",
            "--worker-urls",
            *(w.url for w in workers),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--policy",
            "manual",
            *ROUTER_HEALTH_ARGS,
            # Frequent checks, quick to give up: what a long pause would do to the defaults.
            "--health-check-interval-secs",
            "1",
            "--health-failure-threshold",
            "2",
            "--log-level",
            "warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                body = httpx.get(url + "/workers", timeout=2).json()
                if sum(bool(w.get("is_healthy")) for w in body.get("workers", [])) == 2:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.1)
        else:
            pytest.fail("sglang_router did not report two healthy workers")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


async def test_router_url_routes_generate_and_fans_control_out_to_workers(
    router, workers, reference, tiny_path, tmp_path
):
    urls = sorted(w.url for w in workers)
    eng = SGLangEngine([router])
    try:
        await eng.start()
        assert sorted(eng.worker_urls) == urls  # discovered behind the router
        prompt = [1, 21, 22]
        gen = await eng.generate(prompt, SamplingParams(max_new_tokens=6), "via-router")
        assert_learner_logprobs(reference, prompt, gen)

        key = "abort-me"
        task = asyncio.create_task(
            eng.generate([1, 8], SamplingParams(max_new_tokens=3000), "rab", route_key=key)
        )
        while not any([key in (await server_info(u))["stats"]["routing_keys"] for u in urls]):
            await asyncio.sleep(0.02)
        serving = [u for u in urls if key in (await server_info(u))["stats"]["routing_keys"]][0]
        await wait_steps(serving, 5, task)
        await eng.abort("rab")  # sent to the workers: the router does not fan control calls out
        partial = await task
        assert partial.finish_reason in ("abort", "stop") and len(partial.token_ids) < 3000

        load_model(tiny_path).save_pretrained(tmp_path)
        await eng.pause()
        await eng.update_weights(str(tmp_path), 6)
        await eng.resume()
        assert [await model_version(u) for u in urls] == ["6", "6"]
        assert await eng.worker_health() == {u: True for u in eng.worker_urls}
        gen = await eng.generate(prompt, SamplingParams(max_new_tokens=3), "after")
        assert gen.weight_version == 6
    finally:
        await eng.update_weights(tiny_path, 0)
        await eng.close()


async def test_every_turn_of_a_trajectory_reaches_one_worker(router, workers, caplog):
    """16 three-turn conversations at once, each turn the whole history plus a new user turn
    (as the RolloutManager sends them): each conversation's turns all land on one worker."""
    urls = [w.url for w in workers]
    before = {u: dict((await server_info(u))["stats"]["routing_keys"]) for u in urls}
    eng = SGLangEngine([router])
    run = uuid.uuid4().hex[:8]

    async def conversation(i: int) -> None:
        ids = [1, 30 + i]
        for turn in range(3):
            sampling = SamplingParams(max_new_tokens=3, seed=1000 * i + turn)
            gen = await eng.generate(
                ids, sampling, f"t{i}-{uuid.uuid4().hex}", route_key=f"{run}-traj{i}"
            )
            ids = ids + gen.token_ids + [40 + turn]

    try:
        with caplog.at_level(logging.WARNING, logger="gspo_agents.rollout.sglang_engine"):
            await asyncio.gather(*(conversation(i) for i in range(16)))
    finally:
        await eng.close()
    seen: dict[str, dict[str, int]] = {}
    for u in urls:
        for key, n in (await server_info(u))["stats"]["routing_keys"].items():
            if key not in before[u] and key.startswith(run):
                seen.setdefault(key, {})[u] = n
    assert len(seen) == 16
    assert all(len(by_worker) == 1 for by_worker in seen.values()), seen  # sticky
    assert all(list(by_worker.values()) == [3] for by_worker in seen.values()), seen
    assert {u for by_worker in seen.values() for u in by_worker} == set(urls)  # both used
    assert "deterministic" not in caplog.text  # these workers honour seeds


async def test_the_router_keeps_paused_workers_through_a_long_pause(router, workers):
    """Paused past the workers' /health timeout and the router's failure threshold (issue 23,
    finding 6): with ROUTER_HEALTH_ARGS the router still counts both workers healthy."""
    urls = [w.url for w in workers]

    async def probes() -> int:
        total = 0
        for u in urls:
            seen = (await server_info(u))["stats"]["probes"]
            total += sum(seen.get(p, 0) for p in PROBES)
        return total

    async with httpx.AsyncClient(timeout=30) as client:
        for u in urls:
            await client.post(u + "/pause_generation", json={"mode": "in_place"})
        try:
            start = await probes()
            while await probes() < start + 6 * len(urls):  # three router checks per worker
                await asyncio.sleep(0.2)
            workers_seen = (await client.get(router + "/workers")).json()["workers"]
        finally:
            for u in urls:
                await client.post(u + "/continue_generation", json={})
    assert [bool(w.get("is_healthy")) for w in workers_seen] == [True, True], workers_seen


PROBES = ("/health", "/health_generate", "/model_info", "/get_model_info")


async def test_a_worker_added_to_the_router_serves_only_at_the_current_version(
    router, workers, tiny_path, tmp_path
):
    """The router's members change mid-run (issue 31): a worker added through the router's
    /workers API gets the current weights before any answer of it is used, and a worker the
    router dropped gets no more control calls."""
    v7 = perturbed_weights(tiny_path, tmp_path / "v7", 0.2, seed=7)
    eng = SGLangEngine([router])
    extra = launch(model_path=tiny_path, extra_args=WORKER_ARGS)
    async with httpx.AsyncClient(timeout=30) as client:
        try:
            await eng.update_weights(v7, 7)
            await client.post(router + "/workers", json={"url": extra.url})
            await wait_listed(client, router, extra.url)
            reference = load_model(v7)
            for i in range(16):  # the manual policy spreads keys: some reach the new worker
                gen = await eng.generate(
                    [1, 9, i + 2], SamplingParams(max_new_tokens=3), f"n{i}", route_key=f"add{i}"
                )
                assert gen.weight_version == 7
                assert_learner_logprobs(reference, [1, 9, i + 2], gen)
            assert extra.url in eng.worker_urls and await model_version(extra.url) == "7"
            assert (await server_info(extra.url))["stats"]["requests"] > 0
            listed = (await client.get(router + "/workers")).json()["workers"]
            worker_id = next(w["id"] for w in listed if w["url"] == extra.url)
            assert (await client.delete(f"{router}/workers/{worker_id}")).status_code < 300
            await wait_listed(client, router, extra.url, present=False)
            updates = (await server_info(extra.url))["stats"]["weight_updates"]
            await eng.update_weights(tiny_path, 8)
            assert extra.url not in eng.worker_urls
            assert (await server_info(extra.url))["stats"]["weight_updates"] == updates
            assert [await model_version(w.url) for w in workers] == ["8", "8"]
        finally:
            await eng.update_weights(tiny_path, 9)
            await eng.close()
            extra.stop()


async def wait_listed(client, router: str, url: str, present: bool = True) -> None:
    for _ in range(600):
        listed = (await client.get(router + "/workers")).json()["workers"]
        if any(w["url"] == url and w.get("is_healthy") for w in listed) == present:
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"the router never {'listed' if present else 'dropped'} {url}")
