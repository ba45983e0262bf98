"""The `remote` backend: judging and sessions on one or more `python -m sandbox serve` instances.

    sb = Sandbox.create("remote", urls=["http://sb1:8080", "http://sb2:8080"], max_concurrency=32)
    result = await sb.run(program, tests, limits, judge)      # POST /judge on one service
    async with sb.session(SessionLimits(cpu_s=60)) as ws:     # pinned to one service
        await ws.exec("echo hi")

Creation checks that at least one service answers GET /capacity (else SandboxUnavailable naming
each URL's problem and the fix). Outside an event loop it checks at once; inside one (e.g.
`sandbox.session(backend="remote", ...)` in a running env) creation never blocks the loop: the
first run or session probes every URL concurrently and raises the same error.

The token is `token=` or $GSPO_SANDBOX_TOKEN (sent as `Authorization: Bearer`). `max_concurrency`
caps this client's runs in flight over all services; each service's own capacity (GET /capacity)
caps what goes to it (sandbox/service/fleet.py: health checks, placement, backpressure).

When a run goes to another service (the failover rule). A run is sent again, to another service,
only when the first provably never ran it:
  - the connection could not be made (nothing was sent), or
  - the service answered 429 (its queue is full) or 503 (draining, or a load balancer with no
    server up): both are answered before the run enters a sandbox.
Once a request has been sent, any loss (the connection dropped, a timeout, a 5xx, a load
balancer's 502/504) gives Verdict.SE naming the service, and the run is NOT sent again: it may
have run in part or in full, and a result is never stitched from two runs, nor a test run twice
for one result. It also means a submission that kills its host gets to kill only that one. SE is
infrastructure (envs raise InfraError for it), never a wrong answer. After the retry pauses with
no service up, or the queue timeout with every service full, the run is SE too.

Sessions (sandbox/service/remote_session.py) live on one service for their whole life; a lost
service makes every call raise BackendFailure (infrastructure), never a result.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

from sandbox.core import DEFAULT_JUDGE, DEFAULT_LIMITS, Sandbox, _budget
from sandbox.errors import SandboxUnavailable
from sandbox.registry import register_remote
from sandbox.service.auth import TOKEN_ENV
from sandbox.service.fleet import Fleet, NoHostAvailable
from sandbox.sessions.api import SessionLimits
from sandbox.types import JudgeSpec, Limits, Program, RunResult, TestCase, TestResult, Verdict

log = logging.getLogger("sandbox.remote")
NOT_STARTED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)  # nothing was sent
REFUSED = (429, 503)  # answered before the run entered a sandbox
RETRY_BACKOFF_S = (1.0, 4.0)  # pauses while no service is up, then SE
KEEPALIVE_S = 10.0  # below the service's keep-alive (sandbox/service/main.py): see main.py


def check_urls(urls: Sequence[str] | None) -> list[str]:
    if not urls or isinstance(urls, str):
        raise ValueError(
            "backend='remote' needs urls=[...]: the `python -m sandbox serve` instances "
            "(or their load balancer), e.g. urls=['http://127.0.0.1:8080']"
        )
    bad = [u for u in urls if not str(u).startswith(("http://", "https://"))]
    if bad:
        raise ValueError(f"remote sandbox urls {bad} must start with http:// or https://")
    return [str(u).rstrip("/") for u in urls]


class RemoteSandbox(Sandbox):
    """A Sandbox whose runs happen on sandbox services. It shares Sandbox's public surface
    (run, aclose, backend_name, max_concurrency) and adds session(); none of the local
    machinery (backend, warm pool, compile cache) exists on this side."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        max_concurrency: int = 4,
        token: str | None = None,
        connect_timeout_s: float = 10.0,
        health_interval_s: float = 5.0,
        queue_timeout_s: float = 600.0,
        check: bool = True,
    ) -> None:
        self.urls = check_urls(urls)
        self.backend_name = "remote"
        self.max_concurrency = max_concurrency
        self.compile_cache = None
        self.token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        self.connect_timeout_s = connect_timeout_s
        self.queue_timeout_s = queue_timeout_s
        self._health_interval_s = health_interval_s
        self._sem = asyncio.Semaphore(max_concurrency)  # binds to a loop on first use
        self._fleet: Fleet | None = None
        self._checked = not check
        self._probe: asyncio.Task[None] | None = None
        if check and not _in_event_loop():
            self.check()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def check(self) -> None:
        """Fail, naming the fix, when no service answers or all reject the token. Blocking:
        creation outside an event loop runs it; inside one, the first run or session runs
        `acheck` instead, so that creating the sandbox never stalls the loop."""
        problems = []
        for url in self.urls:
            try:
                reply = httpx.get(
                    url + "/capacity", headers=self._headers(), timeout=self.connect_timeout_s
                )
            except httpx.HTTPError as exc:
                problems.append(_unreachable(url, exc))
                continue
            if reply.status_code == 200:
                self._checked = True
                return  # one is enough to start; the others are health-checked as we go
            problems.append(_refusal(url, reply))
        raise _no_service(problems)

    async def acheck(self) -> None:
        """`check` without blocking the loop: every URL probed at once, on the first run or
        session; once one answered, the fleet's health checks take over."""
        if self._checked:
            return
        if self._probe is None:  # one probe for every run and session that waits on it
            self._probe = asyncio.get_running_loop().create_task(self._probe_all())
        probe = self._probe
        try:
            await asyncio.shield(probe)
        finally:
            if probe.done() and self._probe is probe:
                self._probe = None  # after a failure, the next run or session probes again

    async def _probe_all(self) -> None:
        client = self.fleet.client

        async def probe(url: str) -> str:
            try:
                reply = await client.get(url + "/capacity", timeout=self.connect_timeout_s)
            except httpx.HTTPError as exc:
                return _unreachable(url, exc)
            return "" if reply.status_code == 200 else _refusal(url, reply)

        problems = await asyncio.gather(*(probe(url) for url in self.urls))
        if "" not in problems:
            raise _no_service(problems)
        self._checked = True

    @property
    def fleet(self) -> Fleet:
        """Made on first use, in the event loop that uses this sandbox."""
        if self._fleet is None:
            client = httpx.AsyncClient(
                headers=self._headers(),
                limits=httpx.Limits(max_connections=None, keepalive_expiry=KEEPALIVE_S),
            )
            self._fleet = Fleet(self.urls, client, health_interval_s=self._health_interval_s)
        return self._fleet

    async def aclose(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
            self._probe = None
        if self._fleet is not None:
            fleet, self._fleet = self._fleet, None
            await fleet.aclose()
            await fleet.client.aclose()

    # ---- judging --------------------------------------------------------------------------
    async def run(
        self,
        program: Program,
        tests: Sequence[TestCase],
        limits: Limits = DEFAULT_LIMITS,
        judge: JudgeSpec = DEFAULT_JUDGE,
        *,
        early_stop: bool = False,
    ) -> RunResult:
        tests = list(tests)
        if not tests:
            raise ValueError("Sandbox.run needs at least one TestCase")
        body = judge_body(program, tests, limits, judge, early_stop)
        await self.acheck()
        fleet = self.fleet
        # the run's own worst case (as the local backends' backstop) plus a wait in a queue
        timeout = httpx.Timeout(
            _budget(limits, len(tests)) * (2 if judge.checker else 1) + self.queue_timeout_s,
            connect=self.connect_timeout_s,
        )
        async with self._sem:
            try:
                reply = await self._send(fleet, body, timeout)
            except NoHostAvailable as exc:
                return self._system_error(tests, str(exc))
            except _Lost as exc:
                return self._system_error(tests, str(exc))
        try:
            return result_from_json(reply)
        except (KeyError, ValueError, TypeError) as exc:
            return self._system_error(tests, f"remote sandbox: malformed reply ({exc!r:.200})")

    def session(self, limits: SessionLimits | None = None) -> AbstractAsyncContextManager[Any]:
        """`async with sb.session(SessionLimits(...)) as ws:` a Workspace on one service."""
        from sandbox.service.remote_session import open_session

        return open_session(self, limits or SessionLimits())

    async def _send(self, fleet: Fleet, body: dict[str, Any], timeout: httpx.Timeout) -> Any:
        """POST /judge under the failover rule (module docstring); the reply's JSON."""
        deadline = time.monotonic() + self.queue_timeout_s
        refused: set[str] = set()
        pauses = list(RETRY_BACKOFF_S)
        while True:
            try:
                host = await fleet.acquire(refused, deadline)
            except NoHostAvailable:
                if not pauses or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(pauses.pop(0))  # every service refused or is down
                refused.clear()
                await fleet.refresh()
                continue
            try:
                reply = await fleet.client.post(host.url + "/judge", json=body, timeout=timeout)
            except NOT_STARTED as exc:
                fleet.mark_down(host, f"connection failed ({type(exc).__name__})")
                refused.add(host.url)
                continue
            except httpx.HTTPError as exc:  # sent: it may have run; never sent again
                if not isinstance(exc, httpx.TimeoutException):
                    fleet.mark_down(host, f"lost a run ({type(exc).__name__})")
                raise _Lost(
                    f"remote sandbox {host.url} lost the run after it was sent "
                    f"({type(exc).__name__}: {exc}); not retried elsewhere: it may have run"
                ) from exc
            finally:
                await fleet.release(host)
            if reply.status_code in REFUSED:
                refused.add(host.url)
                continue
            return _json_or_lost(reply, host.url)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _unreachable(url: str, exc: Exception) -> str:
    return f"{url}: unreachable ({type(exc).__name__})"


def _refusal(url: str, reply: httpx.Response) -> str:
    why = f"rejects the token: set {TOKEN_ENV}" if reply.status_code == 401 else ""
    return f"{url}: /capacity answered {reply.status_code} {why}".rstrip()


def _no_service(problems: Sequence[str]) -> SandboxUnavailable:
    return SandboxUnavailable(
        "remote backend: no sandbox service answers: " + "; ".join(problems) + ". Start "
        "them with `python -m sandbox serve` or fix sandbox urls"
    )


class _Lost(Exception):
    """A sent run came back without a result (-> Verdict.SE)."""


def _json_or_lost(reply: httpx.Response, url: str) -> Any:
    if reply.status_code == 400:  # our request is over the service's caps: the caller's mistake
        raise ValueError(f"sandbox service {url} refused the run: {_error_text(reply)}")
    if reply.status_code == 401:
        raise _Lost(f"{url} rejects our token (401): set {TOKEN_ENV} to the service's token")
    if reply.status_code != 200:
        raise _Lost(f"{url} answered {reply.status_code}: {_error_text(reply)}")
    try:
        return reply.json()
    except ValueError as exc:
        raise _Lost(f"{url} answered 200 with a body that is not JSON") from exc


def _error_text(reply: httpx.Response) -> str:
    try:
        return str(reply.json().get("error", reply.text))[:500]
    except ValueError:
        return reply.text[:500]


# ---- the wire ---------------------------------------------------------------------------------
def judge_body(
    program: Program, tests: list[TestCase], limits: Limits, judge: JudgeSpec, early_stop: bool
) -> dict[str, Any]:
    """POST /judge's request for exactly this run (sandbox/service/requests.py parse_judge)."""
    spec: dict[str, Any] = {
        "mode": judge.mode,
        "abs_tol": judge.abs_tol,
        "rel_tol": judge.rel_tol,
        "checker_protocol": judge.checker_protocol,
        "checker_args": list(judge.checker_args),
        "case_sensitive": judge.case_sensitive,
        "space_change_sensitive": judge.space_change_sensitive,
    }
    if judge.checker is not None:
        spec["checker"] = {"language": judge.checker.language, "source": judge.checker.source}
    body: dict[str, Any] = {
        "language": program.language,
        "source": program.source,
        "tests": [{"stdin": t.stdin, "expected": t.expected} for t in tests],
        "limits": {
            "time_s": limits.time_s,
            "memory_mb": limits.memory_mb,
            "output_bytes": limits.output_bytes,
            "processes": limits.processes,
            "wall_time_s": limits.effective_wall_time_s,
        },
        "judge": spec,
        "early_stop": early_stop,
    }
    if program.entry is not None:
        body["entry"] = program.entry
    return body


def result_from_json(reply: dict[str, Any]) -> RunResult:
    tests = tuple(
        TestResult(
            Verdict(t["verdict"]),
            float(t["time_s"]),
            float(t["memory_mb"]),
            t["stdout"],
            t["stderr"],
            t["exit_code"],
            t.get("message", ""),
        )
        for t in reply["tests"]
    )
    return RunResult(
        Verdict(reply["verdict"]),
        tests,
        reply.get("compile_output", ""),
        f"remote:{reply.get('backend', '')}",
    )


# The remote sandboxes `sandbox.session(backend="remote", ...)` made, per event loop and options.
_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, RemoteSandbox]] = (
    weakref.WeakKeyDictionary()
)


def shared_remote(options: dict[str, Any]) -> RemoteSandbox:
    made = _shared.setdefault(asyncio.get_running_loop(), {})
    key = repr(sorted(options.items()))
    if key not in made:
        made[key] = RemoteSandbox(**options)
    return made[key]


async def close_shared() -> None:
    made = list(_shared.pop(asyncio.get_running_loop(), {}).values())
    await asyncio.gather(*(sb.aclose() for sb in made), return_exceptions=True)


class _Remote:
    """This package's side of sandbox/registry.py: how core and sessions reach it."""

    def sandbox(self, max_concurrency: int, **options: Any) -> Sandbox:
        return RemoteSandbox(max_concurrency=max_concurrency, **options)

    def session(self, limits: Any, options: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
        return shared_remote(options).session(limits)

    async def close_shared(self) -> None:
        await close_shared()


register_remote(_Remote())
