"""The service as a fleet member and the `remote` backend, with real services on loopback.

Real `python -m sandbox serve` processes (bubblewrap), real HTTP; services are killed with
SIGKILL or drained with SIGTERM for real.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from fleet_util import AUTH, REPO, TOKEN, Service, alive, descendants, free_port, start_service

from sandbox import (
    JudgeSpec,
    Limits,
    Program,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    TestCase,
    Verdict,
)
from sandbox.judging.functional import function_call
from sandbox.service.auth import TokenError, authorized, check_bind, is_loopback, load_token

AB_PY = "a, b = map(int, input().split())\nprint(a + b)\n"
SLOW = Program("python", "import time\ntime.sleep(4)\nprint(1)\n")


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Service, Service]]:
    a = start_service()
    try:
        b = start_service()
    except BaseException:
        a.stop()
        raise
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def remote(*urls: str, **options: object) -> Sandbox:
    return Sandbox.create("remote", urls=list(urls), token=TOKEN, max_concurrency=4, **options)  # type: ignore[arg-type]


# ---- the token --------------------------------------------------------------------------------
def test_token_rules_without_a_server(tmp_path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("sb")
    with pytest.raises(TokenError, match="refusing to bind '0.0.0.0'"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", TOKEN)
    check_bind("127.0.0.1", None)
    assert authorized(f"Bearer {TOKEN}", TOKEN) and authorized(None, None)
    assert not authorized(None, TOKEN) and not authorized(f"Bearer {TOKEN}x", TOKEN)
    assert not authorized(f"Basic {TOKEN}", TOKEN) and not authorized("Bearer ", TOKEN)
    (tmp_path / "t").write_text(TOKEN + "\n")
    assert load_token(str(tmp_path / "t"), {}) == TOKEN
    assert load_token(None, {"GSPO_SANDBOX_TOKEN": TOKEN}) == TOKEN
    assert load_token(None, {}) is None
    with pytest.raises(TokenError, match="at least 16"):
        load_token(None, {"GSPO_SANDBOX_TOKEN": "short"})


def test_session_limits_a_client_asks_for_are_checked_and_capped() -> None:
    from sandbox.service.session_routes import SessionCaps, parse_session_limits

    caps = SessionCaps()
    assert parse_session_limits({"memory_mb": 512.0, "cpu_s": 30}, caps).memory_mb == 512
    for bad, needle in [
        ({"memory_mb": 512.5}, "integer"),
        ({"memory_mb": caps.memory_mb + 1}, "cap"),
        ({"call_cpu_s": float("inf")}, "finite"),
        ({"cpu_s": "a lot"}, "number"),
        ({"disk_gb": 1}, "unknown"),
        ({"processes": 0}, "positive"),
    ]:
        with pytest.raises(ValueError, match=needle):
            parse_session_limits(bad, caps)


def test_serve_refuses_a_non_loopback_bind_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "GSPO_SANDBOX_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "sandbox", "serve", "--host", "0.0.0.0", "--port", str(port)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "refusing to bind '0.0.0.0' without a token" in done.stderr
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


async def test_requests_without_or_with_a_wrong_token_get_401(pair) -> None:
    a, _ = pair
    body = {"code": "print(1)", "language": "python"}
    async with httpx.AsyncClient(base_url=a.url, timeout=60) as client:
        none = await client.post("/run_code", json=body)
        wrong = await client.post(
            "/run_code", json=body, headers={"Authorization": f"Bearer {TOKEN[:-1]}X"}
        )
        session = await client.post("/sessions", json={})
        right = await client.post("/run_code", json=body, headers=AUTH)
        health = await client.get("/health")
    assert none.status_code == wrong.status_code == session.status_code == 401
    assert none.headers["www-authenticate"] == "Bearer" and "token" in none.json()["error"]
    assert right.status_code == 200 and right.json()["run_result"]["stdout"] == "1\n"
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    wrong_token = {"urls": [a.url], "token": "not-the-token-at-all"}
    with pytest.raises(SandboxUnavailable, match="rejects the token"):  # outside a loop: at once
        await asyncio.to_thread(Sandbox.create, "remote", **wrong_token)  # type: ignore[arg-type]
    inside = Sandbox.create("remote", **wrong_token)  # type: ignore[arg-type]
    try:  # inside a loop: on first use
        with pytest.raises(SandboxUnavailable, match="rejects the token"):
            await inside.run(Program("python", AB_PY), [TestCase("1 2\n", "3")])
    finally:
        await inside.aclose()


# ---- remote judging -------------------------------------------------------------------------
async def test_remote_judging_spreads_over_two_services_with_correct_verdicts(pair) -> None:
    a, b = pair
    served = [a.capacity()["served"], b.capacity()["served"]]
    fn, fn_tests = function_call("def f(x):\n    return 2 * x\n", "f", [
        {"args": [2], "expected": 4}, {"args": [3], "expected": 7},
    ])  # fmt: skip
    checker = Program(
        "python", "import sys\nsys.exit(0 if open(sys.argv[2]).read().strip() == '7' else 1)\n"
    )
    cases = [
        (Program("python", AB_PY), [TestCase("1 2", "3"), TestCase("2 2", "4")], JudgeSpec(), "OK"),
        (Program("python", AB_PY), [TestCase("1 2", "4")], JudgeSpec(), "WA"),
        (Program("python", "while True: pass"), [TestCase("")], JudgeSpec(), "TLE"),
        (Program("cpp", "int main( {"), [TestCase("")], JudgeSpec(), "CE"),
        (Program("python", "print(1.0000001)"), [TestCase("", "1")], JudgeSpec(mode="float"), "OK"),
        (fn, fn_tests, JudgeSpec(), "WA"),
        (Program("python", "print(7)"), [TestCase("", "")], JudgeSpec(mode="checker", checker=checker), "OK"),
    ] * 2  # fmt: skip
    sb = remote(a.url, b.url)
    try:
        limits = Limits(time_s=1)
        results = await asyncio.gather(*(sb.run(p, t, limits, j) for p, t, j, _ in cases))
    finally:
        await sb.aclose()
    assert [r.verdict.value for r in results] == [want for *_, want in cases]
    assert [t.verdict for t in results[5].tests] == [Verdict.OK, Verdict.WA]
    assert results[0].backend == "remote:bubblewrap"
    now = [a.capacity()["served"], b.capacity()["served"]]
    assert now[0] > served[0] and now[1] > served[1]  # both services took runs


async def test_a_dead_url_is_skipped_without_losing_a_run(pair) -> None:
    a, _ = pair
    dead = f"http://127.0.0.1:{free_port()}"
    sb = remote(dead, a.url)
    try:
        results = await asyncio.gather(
            *(sb.run(Program("python", AB_PY), [TestCase(f"{i} 1", str(i + 1))]) for i in range(6))
        )
        hosts = {h.url: h for h in sb.fleet.hosts}
    finally:
        await sb.aclose()
    assert [r.verdict for r in results] == [Verdict.OK] * 6
    assert not hosts[dead].up
    assert hosts[dead].reason.startswith(("unreachable", "connection failed")), hosts[dead].reason


async def test_a_service_that_answers_429_is_skipped_and_never_ran_the_run() -> None:
    full = start_service("--max-queue", "0", sessions=0)  # max-concurrency 2, no queue
    spare = start_service(sessions=0)
    hold = {"code": "import time\ntime.sleep(6)", "language": "python", "run_timeout": 10}
    sb = remote(full.url, spare.url)
    try:
        async with httpx.AsyncClient(base_url=full.url, headers=AUTH, timeout=120) as client:
            blockers = [
                asyncio.ensure_future(client.post("/run_code", json=hold)) for _ in range(2)
            ]
            while full.capacity()["in_flight"] < 2:  # another client fills it to the brim
                await asyncio.sleep(0.05)
            served = full.capacity()["served"]
            results = await asyncio.gather(
                *(sb.run(Program("python", AB_PY), [TestCase("3 4", "7")]) for _ in range(4))
            )
            assert full.capacity()["served"] == served  # it refused them all before running
            assert [r.status_code for r in await asyncio.gather(*blockers)] == [200, 200]
    finally:
        await sb.aclose()
        full.stop()
        spare.stop()
    assert [r.verdict for r in results] == [Verdict.OK] * 4  # all of them ran on the spare


async def test_a_service_killed_mid_run_gives_SE_and_the_run_is_not_sent_again() -> None:
    a, b = start_service(sessions=0), start_service(sessions=0)
    sb = remote(a.url, b.url)
    try:
        slow = asyncio.ensure_future(sb.run(SLOW, [TestCase("", "1")], Limits(time_s=10)))
        while not any(h.in_flight for h in sb.fleet.hosts):
            await asyncio.sleep(0.05)
        busy = next(h for h in sb.fleet.hosts if h.in_flight)
        victim, survivor = (a, b) if busy.url == a.url else (b, a)
        while victim.capacity()["in_flight"] == 0:  # the run is inside the service now
            await asyncio.sleep(0.05)
        before = survivor.capacity()["served"]
        victim.kill()
        lost = await slow
        assert lost.verdict is Verdict.SE and "not retried" in lost.tests[0].message
        assert survivor.capacity()["served"] == before  # never re-run elsewhere
        after = await sb.run(Program("python", AB_PY), [TestCase("2 3", "5")])
        assert after.verdict is Verdict.OK
        assert not next(h for h in sb.fleet.hosts if h.url == victim.url).up
    finally:
        await sb.aclose()
        a.stop()
        b.stop()


# ---- remote sessions ------------------------------------------------------------------------
async def test_sessions_are_pinned_to_their_service_and_spread(pair) -> None:
    a, b = pair
    sb = remote(a.url, b.url)
    try:
        async with contextlib_stack(sb, 4) as workspaces:
            for i, ws in enumerate(workspaces):
                await ws.exec(f"mkdir d{i} && cd d{i} && export N={i}")
                await ws.python(f"v = {i} * 10")
            assert {ws.url for ws in workspaces} == {a.url, b.url}
            assert a.capacity()["sessions"]["live"] == b.capacity()["sessions"]["live"] == 2
            for i, ws in enumerate(workspaces):
                out = await ws.exec('echo "$(basename "$PWD") $N"')
                assert out.stdout == f"d{i} {i}\n"
                assert (await ws.python("v")).stdout == f"{i * 10}\n"
            ws = workspaces[0]
            await ws.write_file("x/y.txt", "hi")
            assert await ws.read_file("x/y.txt") == b"hi"
            with pytest.raises(FileNotFoundError):
                await ws.read_file("missing.txt")
            assert (await ws.usage()).calls >= 3
        assert a.capacity()["sessions"]["live"] == b.capacity()["sessions"]["live"] == 0
    finally:
        await sb.aclose()


def contextlib_stack(sb: Sandbox, n: int):
    import contextlib

    @contextlib.asynccontextmanager
    async def stack():
        async with contextlib.AsyncExitStack() as es:
            yield [await es.enter_async_context(sb.session()) for _ in range(n)]  # type: ignore[attr-defined]

    return stack()


async def test_a_session_whose_host_dies_is_an_infrastructure_error() -> None:
    from envs.errors import InfraError
    from envs.tools.session import EpisodeSession
    from sandbox import SessionLimits, close_sessions

    service = start_service()
    episode = EpisodeSession("remote", urls=[service.url], token=TOKEN)
    try:
        await episode.open(SessionLimits(cpu_s=30))
        out = await episode.call("exec", "echo up", timeout_s=10, on_budget_spent=lambda: None)
        assert out.strip() == "up"
        service.kill()
        with pytest.raises(InfraError, match="lost"):
            await episode.call("exec", "echo again", timeout_s=10, on_budget_spent=lambda: None)
        with pytest.raises(SandboxError, match="unusable"):  # never a tool result or reward
            await episode.ws.exec("true")
    finally:
        await episode.close()
        await close_sessions()
        service.stop()


# ---- draining -------------------------------------------------------------------------------
async def test_sigterm_drains_finishes_in_flight_and_closes_sessions() -> None:
    service = start_service()
    async with httpx.AsyncClient(base_url=service.url, headers=AUTH, timeout=120) as client:
        sid = (await client.post("/sessions", json={})).json()["id"]
        assert (
            await client.post(f"/sessions/{sid}/exec", json={"command": "true"})
        ).status_code == 200
        body = {
            "code": "import time\ntime.sleep(3)\nprint(5)",
            "language": "python",
            "run_timeout": 10,
        }
        in_flight = asyncio.ensure_future(client.post("/run_code", json=body))
        while service.capacity()["in_flight"] == 0:
            await asyncio.sleep(0.05)
        below = descendants(service.proc.pid)
        assert below  # the session's sandbox and the run's
        service.proc.send_signal(signal.SIGTERM)
        reply = await in_flight
    assert reply.status_code == 200 and reply.json()["run_result"]["stdout"] == "5\n"
    # a drain is a clean exit (uvicorn re-raises the SIGTERM; serve turns it into 0)
    assert service.proc.wait(timeout=120) == 0, service.proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
    assert b"drained after SIGTERM" in service.proc.stderr.read()  # type: ignore[union-attr]
    with pytest.raises(httpx.ConnectError):
        httpx.get(service.url + "/health", timeout=5)
    deadline = asyncio.get_running_loop().time() + 60
    while alive(below) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
    assert alive(below) == set()  # every session sandbox and agent is gone
