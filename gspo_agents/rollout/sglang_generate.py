"""The /generate path's HTTP client: a minimal HTTP/1.1 keep-alive client on asyncio (issue 33).

Why not httpx here (the client of every control call, sglang_http.py): httpcore's pool walks
every pooled connection for each request it queues or releases (`_assign_requests_to_connections`,
with an `is_idle()` list per idle connection inside it: O(connections^2) per request). A rollout
holds one connection per in-flight episode, so the client's cost grew with N; bounding the pool
cannot help, since SGLang batches the requests it holds and one connection per in-flight request
is the point. Measured in one run against the instant stand-in (benchmarks/rollout_scale.py
--clients, a loaded 2-core machine; the README has the table): httpx, aiohttp and this client,
CPU of the driving process per turn. aiohttp (a C parser, an O(1) pool) removes the growth but
still costs ~3x the manager's own work per turn; this client is what reaches the target of 2x.

What it does, and all it does: POST a body, read one answer with Content-Length, chunked or
close-delimited framing; a pool per worker URL of idle keep-alive connections (a deque: taking
and giving back are O(1); newest first, so idle ones age out at the far end), at most
`max_connections` in flight per worker (a semaphore), keep-alive expiry under SGLang's
(uvicorn's) 5 s, a connect timeout and no read timeout (a paused request blocks server-side).
A sharp line between a request that never left (`GenerateNotSent`: no connection could be made)
and one that may have reached the server (`GenerateLost`): the engine aborts the latter's rid
before retrying. Cancellation propagates; the connection it interrupted is closed.

Not here: routing, retries, bodies and answers (sglang_engine.py, sglang_body.py, sglang_wire.py).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit


class GenerateNotSent(Exception):
    """The connection could not be made: the request never reached the server."""


class GenerateLost(Exception):
    """The connection failed after the request may have been sent."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        answer = _parse(self._buf, eof=True)
        if answer is not None:
            waiter.set_result(answer)
        else:
            waiter.set_exception(GenerateLost(f"connection closed mid-answer ({exc!r})"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        self._buf += data
        answer = _parse(self._buf, eof=False)
        if answer is not None and not self._waiter.done():
            self._waiter.set_result(answer)
            self._waiter = None

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes, bool]:
        assert self.transport is not None and self._waiter is None
        self._buf.clear()
        self._waiter = asyncio.get_running_loop().create_future()
        if len(body) < 65536:
            self.transport.write(head + body)
        else:  # no copy of a long history's body
            self.transport.write(head)
            self.transport.write(body)
        return await self._waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _parse(buf: bytearray, eof: bool) -> tuple[int, bytes, bool] | None:
    """(status, body, reusable) once `buf` holds a whole answer, else None."""
    end = buf.find(b"\r\n\r\n")
    while end >= 0 and buf[9:10] == b"1":  # an interim 1xx answer: skip it
        del buf[: end + 4]
        end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, chunked, reusable = None, False, lines[0].startswith(b"HTTP/1.1")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            reusable = reusable and b"close" not in value.lower()
    start = end + 4
    if chunked:
        if not buf.endswith(b"\r\n\r\n"):  # cannot be whole yet: no re-walk of its chunks
            return None
        body = _dechunk(buf, start)
        return None if body is None else (status, body, reusable)
    if length is not None:
        return (
            None
            if len(buf) < start + length
            else (status, bytes(buf[start : start + length]), reusable)
        )
    return (status, bytes(buf[start:]), False) if eof else None  # framed by the close


def _dechunk(buf: bytearray, pos: int) -> bytes | None:
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
    """A worker's idle connections and its in-flight bound."""

    def __init__(self, url: str, max_connections: int) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = parts.scheme == "https"
        self.host_header = parts.netloc.encode()
        self.idle: collections.deque[_Connection] = collections.deque()
        self.slots = asyncio.Semaphore(max_connections)

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
        self._split: dict[str, tuple[str, bytes]] = {}  # url -> (origin, path)
        # Called with (url, body) before each request is sent (tests record the wire with it).
        self.on_request: list[Callable[[str, bytes], None]] = []

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        """(status, body bytes) of one POST; GenerateNotSent / GenerateLost on transport errors."""
        if asyncio.get_running_loop() is not self._loop:  # a new loop: the old one's sockets
            self._pools, self._loop = {}, asyncio.get_running_loop()  # died with it
        origin, path = self._split.get(url) or self._split_url(url)
        pool = self._pools.get(origin) or self._pools.setdefault(origin, _Pool(origin, self._max))
        head = _head(path, pool.host_header, len(body), headers)
        for hook in self.on_request:
            hook(url, body)
        async with pool.slots:
            conn = pool.take(self._keepalive_s) or await self._connect(pool)
            reusable = False
            try:
                status, answer, reusable = await conn.request(head, body)
                return status, answer
            finally:
                if reusable and not conn.closed:
                    conn.idle_since = time.monotonic()
                    pool.idle.append(conn)
                else:
                    conn.close()

    def _split_url(self, url: str) -> tuple[str, bytes]:
        parts = urlsplit(url)
        split = (f"{parts.scheme}://{parts.netloc}", (parts.path or "/").encode())
        if parts.query:
            split = (split[0], split[1] + b"?" + parts.query.encode())
        self._split[url] = split
        return split

    async def _connect(self, pool: _Pool) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Connection, pool.host, pool.port, ssl=pool.ssl or None),
                self._connect_s,
            )
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
    lines = [b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n" % (path, host, length)]
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name} holds a line break: {value!r}")
        lines.append(f"{name}: {value}\r\n".encode())
    lines.append(b"\r\n")
    return b"".join(lines)
