"""Three sandbox services behind a real HAProxy, configured by deploy/haproxy/haproxy.cfg as shipped.

The `remote` backend gets one URL (the load balancer): runs spread over the instances, sessions
stick to the instance that made them (HAProxy's stick table on X-Sandbox-Session), the token
passes through, and an instance that dies leaves the rotation while runs go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from fleet_util import REPO, TOKEN, Service, free_port, require_tool, start_service

from sandbox import Program, Sandbox, TestCase, Verdict

CONFIG = REPO / "deploy" / "haproxy" / "haproxy.cfg"
AB_PY = "a, b = map(int, input().split())\nprint(a + b)\n"


@pytest.fixture(scope="module")
def balanced() -> Iterator[tuple[str, list[Service]]]:
    haproxy = require_tool("haproxy")
    services: list[Service] = []
    lb_port = free_port()
    proc = None
    try:
        for _ in range(3):
            services.append(start_service(sessions=4))
        env = {**os.environ, "GSPO_LB_BIND": f"127.0.0.1:{lb_port}"}
        for i, service in enumerate(services, 1):
            env[f"GSPO_SANDBOX_{i}"] = f"127.0.0.1:{service.port}"
        checked = subprocess.run([haproxy, "-c", "-f", str(CONFIG)], env=env, capture_output=True)
        assert checked.returncode == 0, checked.stderr.decode()
        proc = subprocess.Popen(
            [haproxy, "-db", "-f", str(CONFIG)], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        url = f"http://127.0.0.1:{lb_port}"
        _wait_for(lambda: _status(url + "/health") == 200, "haproxy answers /health")
        yield url, services
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        for service in services:
            service.stop()


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=10).status_code
    except httpx.HTTPError:
        return 0


def _wait_for(ok, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.3)


async def test_runs_through_haproxy_spread_over_the_instances(balanced) -> None:
    url, services = balanced
    before = [s.capacity()["served"] for s in services]
    async with httpx.AsyncClient(timeout=60) as client:
        assert (await client.post(url + "/judge", json={})).status_code == 401  # token passes
    sb = Sandbox.create("remote", urls=[url], token=TOKEN, max_concurrency=6)  # type: ignore[arg-type]
    try:
        results = await asyncio.gather(
            *(
                sb.run(Program("python", AB_PY), [TestCase(f"{i} {i}", str(2 * i))])
                for i in range(18)
            )
        )
    finally:
        await sb.aclose()
    assert [r.verdict for r in results] == [Verdict.OK] * 18
    took = [s.capacity()["served"] - b for s, b in zip(services, before)]
    assert sum(took) == 18 and sum(1 for t in took if t) >= 2, took


async def test_sessions_through_haproxy_stick_to_their_instance(balanced) -> None:
    url, services = balanced
    sb = Sandbox.create("remote", urls=[url], token=TOKEN)  # type: ignore[arg-type]
    try:
        async with contextlib.AsyncExitStack() as stack:
            spaces = [await stack.enter_async_context(sb.session()) for _ in range(6)]  # type: ignore[attr-defined]
            live = [s.capacity()["sessions"]["live"] for s in services]
            assert sum(live) == 6 and sum(1 for n in live if n) >= 2, live
            for i, ws in enumerate(spaces):
                await ws.exec(f"export K={i}")
            for _ in range(2):  # every call reaches the instance holding the session
                for i, ws in enumerate(spaces):
                    assert (await ws.exec("echo $K")).stdout == f"{i}\n"
    finally:
        await sb.aclose()
    assert sum(s.capacity()["sessions"]["live"] for s in services) == 0


async def test_an_instance_that_dies_leaves_the_rotation(balanced) -> None:
    url, services = balanced
    victim = services[-1]
    victim.kill()
    sb = Sandbox.create("remote", urls=[url], token=TOKEN, max_concurrency=4)  # type: ignore[arg-type]
    try:
        results = await asyncio.gather(
            *(sb.run(Program("python", AB_PY), [TestCase("1 1", "2")]) for _ in range(12))
        )
    finally:
        await sb.aclose()
    # runs that found the dead instance before HAProxy's check did were re-sent by HAProxy only
    # on a failed connection (retry-on conn-failure), so none is lost or run twice
    assert [r.verdict for r in results] == [Verdict.OK] * 12
