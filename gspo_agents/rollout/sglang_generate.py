"""The /generate path's HTTP client: a minimal HTTP/1.1 keep-alive client on asyncio (issue 33).

Why not httpx here (the client of every control call, sglang_http.py): httpcore's pool walks
every pooled connection for each request it queues or releases (`_assign_requests_to_connections`,
with an `is_idle()` list per idle connection inside it: O(connections^2) per request). A rollout
holds one connection per in-flight episode, so the client's cost grew with N; bounding the pool
cannot help, since SGLang batches the requests it holds and one connection per in-flight request
is the point. Measured in one run against the instant stand-in (benchmarks/rollout_scale.py
--clients, a loaded 2-core machine; the README has the table): httpx, aiohttp and this client,
CPU of the driving process per turn. aiohttp (a C parser, an O(1) pool) removes the growth but
still costs ~3x the manager's own work per turn; this client costs about 2x (the rest is the
socket round trip, a third of it kernel time on loopback, and the engine's own Python).

What it does, and all it does: POST a body, read one answer with Content-Length, chunked or
close-delimited framing; a pool per worker URL of idle keep-alive connections (a deque: taking
and giving back are O(1); newest first, so idle ones age out at the far end), at most
`max_connections` in flight per worker (a count, the freed slot handed to the first waiter),
keep-alive expiry under SGLang's (uvicorn's) 5 s, a connect timeout and no read timeout (a
paused request blocks server-side).
Requests made in one event-loop turn are written together, at the start of the next turn (one
callback for all of them): the engine gets them as one burst instead of one wake-up per request.
Measured at N = 1,024 against the instant stand-in on loopback, where each send to an idle server
paid for waking it: the socket's share of a turn fell from ~0.09 to 0.05-0.07 ms of CPU, its
kernel time from 0.034 to 0.015 ms (benchmarks/rollout_scale.py --breakdown; the README has the
table). A request waits at most one loop turn for it. A reused connection found closed when its
turn comes was never written to: the request goes over another connection, and the worker is
not blamed.
A sharp line between a request that never left (`GenerateNotSent`: no connection could be made)
and one that may have reached the server (`GenerateLost`): the engine aborts the latter's rid
before retrying. Cancellation propagates; the connection it interrupted is closed.

Not here: routing, retries, bodies and answers (sglang_engine.py, sglang_body.py, sglang_wire.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

_TIMEOUT_CM = hasattr(asyncio, "timeout")  # Python 3.11+

# A request body: bytes, or a read-only view (the engine's cached body, sent with no copy)
Body = bytes | memoryview


class GenerateNotSent(Exception):
    """The connection could not be made: the request never reached the server."""


class GenerateLost(Exception):
    """The connection failed after the request may have been sent."""


class _NotWritten(Exception):
    """The connection closed before the request's bytes were written: it never left."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    __slots__ = ("transport", "closed", "idle_since", "_buf", "_waiter", "_out")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buf = bytearray()  # an answer that came in more than one read, so far
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._out: tuple[bytes, Body] | None = None  # a request armed, not written yet

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if self._out is not None:
            self._out = None
            waiter.set_exception(_NotWritten())
            return
        answer = _parse(self._buf, eof=True)
        if answer is not None:
            waiter.set_result(answer)
        else:
            waiter.set_exception(GenerateLost(f"connection closed mid-answer ({exc!r})"))

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or self._out is not None:  # bytes nobody asked for (yet): out of step
            self.close()
            return
        if self._buf:
            self._buf += data
            answer = _parse(self._buf, eof=False)
        else:  # most answers come in one read: parsed where they lie, no copy
            answer = _parse(data, eof=False)
            if answer is None:
                self._buf += data
        if answer is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(answer)

    def arm(self, head: bytes, body: Body, waiter: asyncio.Future) -> None:
        """Take one request, written by `write`; `waiter` gets (status, body, reusable), or
        GenerateLost once written, or _NotWritten where the connection closed before."""
        assert self.transport is not None and self._waiter is None
        self._buf.clear()
        self._waiter = waiter
        self._out = (head, body)

    def write(self) -> None:
        out, self._out = self._out, None
        if out is None:  # its request was cancelled (the connection closed) or failed meanwhile
            return
        assert self.transport is not None
        if self.closed or self.transport.is_closing():
            self._fail(_NotWritten())
            return
        head, body = out
        try:
            if len(body) < 65536:
                self.transport.write(head + body)
            else:  # no copy of a long history's body (a view of the engine's buffer)
                self.transport.write(head)
                self.transport.write(body)
        except Exception as exc:  # noqa: BLE001 - fail this request alone, not the flush's others
            self._fail(GenerateLost(f"writing the request failed: {exc!r}"))
            self.close()

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _header(head: bytes, name: bytes) -> bytes | None:
    """The value of header `name` (lower case, with its colon) in a lower-cased head; the last
    one where it repeats."""
    at = head.rfind(b"\r\n" + name)
    if at < 0:
        return None
    at += 2 + len(name)
    eol = head.find(b"\r\n", at)
    return head[at:] if eol < 0 else head[at:eol]


def _parse(buf: bytes | bytearray, eof: bool) -> tuple[int, bytes, bool] | None:
    """(status, body, reusable) once `buf` holds a whole answer, else None."""
    start = 0
    end = buf.find(b"\r\n\r\n")
    while end >= 0 and buf[start + 9 : start + 10] == b"1":  # an interim 1xx answer: skip it
        start = end + 4
        end = buf.find(b"\r\n\r\n", start)
    if end < 0:
        return None
    head = bytes(buf[start:end]).lower()
    status = int(head.split(b" ", 2)[1])
    reusable = head.startswith(b"http/1.1")
    connection = _header(head, b"connection:")
    if connection is not None and b"close" in connection:
        reusable = False
    start = end + 4
    encoding = _header(head, b"transfer-encoding:")
    if encoding is not None and b"chunked" in encoding:
        if not buf.endswith(b"\r\n\r\n"):  # cannot be whole yet: no re-walk of its chunks
            return None
        body = _dechunk(buf, start)
        return None if body is None else (status, body, reusable)
    length = _header(head, b"content-length:")
    if length is not None:
        stop = start + int(length)
        return None if len(buf) < stop else (status, bytes(buf[start:stop]), reusable)
    return (status, bytes(buf[start:]), False) if eof else None  # framed by the close


def _dechunk(buf: bytes | bytearray, pos: int) -> bytes | None:
    parts: list[bytes] = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        if size == 0:  # the last chunk, then trailers up to an empty line
            return b"".join(parts) if buf.find(b"\r\n\r\n", eol) >= 0 else None
        if len(buf) < eol + 2 + size + 2:
            return None
        parts.append(bytes(buf[eol + 2 : eol + 2 + size]))
        pos = eol + 2 + size + 2


class _Pool:
    """A worker's idle connections and its in-flight bound: `active` requests hold a slot, at
    most `most`; the rest wait in `waiters` (pending futures only), first come first served. A
    slot freed while some wait passes straight to the first of them."""

    def __init__(self, url: str, max_connections: int) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = parts.scheme == "https"
        self.host_header = parts.netloc.encode()
        self.idle: collections.deque[_Connection] = collections.deque()
        self.most = max_connections
        self.active = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def wait_for_slot(self) -> None:
        """Queue for a slot (all `most` are held); the releaser hands its slot over."""
        slot = asyncio.get_running_loop().create_future()
        self.waiters.append(slot)
        try:
            await slot
        except asyncio.CancelledError:
            if slot.cancelled():
                with contextlib.suppress(ValueError):  # a release may have dropped it already
                    self.waiters.remove(slot)
            else:  # handed a slot just as we were cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        while self.waiters:
            slot = self.waiters.popleft()
            if not slot.done():
                slot.set_result(None)  # the slot is its now: `active` stays
                return
        self.active -= 1

    def take(self, expiry_s: float) -> _Connection | None:
        """The newest idle connection still open and fresh; expired ones are closed."""
        deadline = time.monotonic() - expiry_s
        while self.idle and (self.idle[0].closed or self.idle[0].idle_since < deadline):
            self.idle.popleft().close()
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None


class GenerateClient:
    """POSTs /generate bodies over keep-alive connections, a pool per worker URL."""

    def __init__(
        self, *, connect_timeout_s: float, keepalive_expiry_s: float, max_connections: int
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self._connect_s = connect_timeout_s
        self._keepalive_s = keepalive_expiry_s
        self._max = max_connections
        self._pools: dict[str, _Pool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the pools' (one loop's sockets)
        self._split: dict[str, tuple[_Pool, bytes]] = {}  # url -> (its worker's pool, path)
        self.opened = 0  # connections made so far (a benchmark checks that a warm run makes none)
        self.flushes = 0  # loop turns that wrote requests (a test checks that they coalesce)
        self._outbox: list[_Connection] = []  # armed this loop turn, written at the next
        # Called with (url, body) before each request is sent (tests record the wire with it).
        self.on_request: list[Callable[[str, bytes], None]] = []

    async def post(self, url: str, body: Body, headers: Mapping[str, str]) -> tuple[int, bytes]:
        """(status, body bytes) of one POST; GenerateNotSent / GenerateLost on transport errors.
        `body` may be a view (the engine's cached body): its bytes must not change until the
        call returns (sglang_body.py never changes a buffer while a view of it lives)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop: the old one's sockets died with it
            self._pools, self._split, self._loop, self._outbox = {}, {}, loop, []
        pool, path = self._split.get(url) or self._split_url(url)
        head = _head(path, pool.host_header, len(body), headers)
        if self.on_request:
            wire = bytes(body)
            for hook in self.on_request:
                hook(url, wire)
        if pool.active < pool.most:
            pool.active += 1
        else:
            await pool.wait_for_slot()
        conn: _Connection | None = None
        reusable = False
        try:
            while True:
                conn = pool.take(self._keepalive_s)
                fresh = conn is None
                if conn is None:
                    conn = await self._connect(pool)
                answer: asyncio.Future[tuple[int, bytes, bool]] = loop.create_future()
                conn.arm(head, body, answer)
                if not self._outbox:
                    loop.call_soon(self._flush)
                self._outbox.append(conn)
                try:
                    status, data, reusable = await answer
                except _NotWritten:  # closed under us before it was written: it never left
                    conn.close()
                    conn = None
                    if fresh:
                        raise GenerateNotSent(
                            f"{pool.host}:{pool.port} closed a new connection before the "
                            "request could be written"
                        ) from None
                    continue  # an idle one the server closed: try the next, or a new one
                return status, data
        finally:
            if conn is not None:
                if reusable and not conn.closed:
                    conn.idle_since = time.monotonic()
                    pool.idle.append(conn)
                else:
                    conn.close()
            pool.release()

    def _flush(self) -> None:
        """Write every request armed since the last flush (one loop turn's)."""
        out, self._outbox = self._outbox, []
        self.flushes += 1
        for conn in out:
            conn.write()

    def _split_url(self, url: str) -> tuple[_Pool, bytes]:
        parts = urlsplit(url)
        origin, path = f"{parts.scheme}://{parts.netloc}", (parts.path or "/").encode()
        if parts.query:
            path += b"?" + parts.query.encode()
        pool = self._pools.get(origin) or self._pools.setdefault(origin, _Pool(origin, self._max))
        self._split[url] = (pool, path)
        return pool, path

    async def _connect(self, pool: _Pool) -> _Connection:
        self.opened += 1
        connecting = asyncio.get_running_loop().create_connection(
            _Connection, pool.host, pool.port, ssl=pool.ssl or None
        )
        try:
            if _TIMEOUT_CM:  # no task per connection (wait_for wraps the coroutine in one)
                async with asyncio.timeout(self._connect_s):  # type: ignore[attr-defined]  # 3.11+
                    _, conn = await connecting
            else:
                _, conn = await asyncio.wait_for(connecting, self._connect_s)
        except (OSError, asyncio.TimeoutError) as exc:
            raise GenerateNotSent(
                f"could not connect to {pool.host}:{pool.port}: {type(exc).__name__}: {exc}"
            ) from exc
        return conn

    async def aclose(self) -> None:
        for pool in self._pools.values():
            while pool.idle:
                pool.idle.pop().close()
        self._pools.clear()


def _head(path: bytes, host: bytes, length: int, headers: Mapping[str, str]) -> bytes:
    lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
    if lines.count("\n") != len(headers) or lines.count("\r") != len(headers):
        bad = next(f"{n}: {v}" for n, v in headers.items() if set("\r\n") & set(n + v))
        raise ValueError(f"header {bad!r} holds a line break")
    return b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n%s\r\n" % (
        path,
        host,
        length,
        lines.encode(),
    )
