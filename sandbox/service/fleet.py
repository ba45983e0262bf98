"""The `remote` backend's view of its sandbox services: health, capacity, and where a run goes.

Consumes: the URLs of `python -m sandbox serve` instances (or of a load balancer in front of
them) and their answers to GET /health and GET /capacity, polled every `health_interval_s` by
one monitor task (started on first use, cancelled by `aclose`). Produces: `acquire()`, a host
that is up and has room, chosen by the lowest in-flight/slots ratio, where slots is the
service's advertised max_concurrency and room is max_concurrency + max_queue (what it accepts
before answering 429); when every host is full, `acquire` waits until one frees a slot.

A host is down after a failed check or a failed connection; the next check that passes brings
it back. Going down and coming back are logged as warnings (the console shows them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger("sandbox.remote")


class NoHostAvailable(Exception):
    """No service is up (after the retry pauses), or none accepted within the queue timeout."""


@dataclass(slots=True)
class Host:
    url: str
    up: bool = True  # optimistic until a check says otherwise
    slots: int = 1  # advertised max_concurrency
    room: int = 1  # advertised max_concurrency + max_queue
    max_sessions: int = 0
    sessions_live: int = 0
    in_flight: int = 0  # this client's runs on it now
    our_sessions: int = 0  # this client's sessions on it now
    reason: str = ""  # why it is down
    checked: bool = False
    down_at: float = 0.0  # when it was last marked down (monotonic)


class Fleet:
    def __init__(
        self,
        urls: list[str],
        client: httpx.AsyncClient,
        *,
        health_interval_s: float = 5.0,
        check_timeout_s: float = 10.0,
    ) -> None:
        self.hosts = [Host(url) for url in urls]
        self.client = client
        self.health_interval_s = health_interval_s
        self.check_timeout_s = check_timeout_s
        self._changed: asyncio.Condition | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._turn = 0  # round-robin among equally loaded hosts

    # ---- health ---------------------------------------------------------------------------
    def _start(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
            self._monitor = asyncio.get_running_loop().create_task(self._watch(), name="fleet")
        return self._changed

    async def _watch(self) -> None:
        """Checks every host every health_interval_s until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.health_interval_s)

    async def refresh(self) -> None:
        await asyncio.gather(*(self._check(h) for h in self.hosts))
        await self._notify()

    async def _check(self, host: Host) -> None:
        started = time.monotonic()
        try:
            reply = await self.client.get(host.url + "/capacity", timeout=self.check_timeout_s)
        except httpx.HTTPError as exc:
            self.mark_down(host, f"unreachable ({type(exc).__name__}: {exc})")
            return
        if reply.status_code == 401:
            self.mark_down(host, "it rejects our token (set GSPO_SANDBOX_TOKEN to the service's)")
            return
        try:
            info: dict[str, Any] = reply.raise_for_status().json()
            if info.get("draining"):
                self.mark_down(host, "draining")
                return
            host.slots = max(1, int(info["max_concurrency"]))
            host.room = host.slots + max(0, int(info["max_queue"]))
            sessions = info.get("sessions") or {}
            host.max_sessions = int(sessions.get("max_sessions", 0))
            host.sessions_live = int(sessions.get("live", 0))
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self.mark_down(host, f"/capacity answered {reply.status_code}: {exc}")
            return
        host.checked = True
        if host.down_at >= started:  # a failure seen while this check ran is newer: it wins
            return
        if not host.up:
            log.warning("sandbox service %s is back up", host.url)
        host.up, host.reason = True, ""

    def mark_down(self, host: Host, reason: str) -> None:
        if host.up or not host.checked:
            log.warning("sandbox service %s is down: %s", host.url, reason)
        host.up, host.reason, host.checked = False, reason, True
        host.down_at = time.monotonic()

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    # ---- placement ------------------------------------------------------------------------
    async def acquire(self, exclude: set[str], deadline: float) -> Host:
        """An up host not in `exclude` with room; waits while all are full (until deadline)."""
        changed = self._start()
        async with changed:
            while True:
                live = [h for h in self.hosts if h.up and h.url not in exclude]
                if not live:
                    raise NoHostAvailable(self.describe(exclude))
                free = [h for h in live if h.in_flight < h.room]
                if free:
                    host = self._least_loaded(free, lambda h: h.in_flight / h.slots)
                    host.in_flight += 1
                    return host
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NoHostAvailable("every sandbox service is full (queue timeout)")
                try:
                    await asyncio.wait_for(changed.wait(), min(left, self.health_interval_s))
                except asyncio.TimeoutError:
                    pass

    def session_host(self, exclude: set[str]) -> Host:
        """The up host (not in exclude) with the most free session slots."""
        candidates = [h for h in self.hosts if h.up and h.url not in exclude and h.max_sessions > 0]
        if not candidates:
            raise NoHostAvailable(self.describe(exclude, sessions=True))
        return self._least_loaded(
            candidates, lambda h: max(h.sessions_live, h.our_sessions) / h.max_sessions
        )

    def _least_loaded(self, hosts: list[Host], load: Any) -> Host:
        self._turn += 1
        order = hosts[self._turn % len(hosts) :] + hosts[: self._turn % len(hosts)]
        return min(order, key=load)

    async def release(self, host: Host) -> None:
        host.in_flight -= 1
        await self._notify()

    def describe(self, exclude: set[str] = frozenset(), *, sessions: bool = False) -> str:  # type: ignore[assignment]
        parts = []
        for h in self.hosts:
            if not h.up:
                state = f"down: {h.reason}"
            elif h.url in exclude:
                state = "refused or unreachable just now"
            elif sessions and h.max_sessions == 0:
                state = "serves no sessions (start it with --max-sessions N)"
            else:
                state = "up"
            parts.append(f"{h.url} ({state})")
        return "no sandbox service can take it: " + "; ".join(parts)

    async def aclose(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)
        self._monitor, self._changed = None, None
