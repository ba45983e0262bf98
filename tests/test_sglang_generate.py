"""The /generate client (sglang_generate.py): keep-alive, a bounded pool per worker, and the line
between a request that never left and one that may have arrived. Fast: raw asyncio servers."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from gspo_agents.rollout.sglang_generate import (
    GenerateClient,
    GenerateLost,
    GenerateNotSent,
    _parse,
    _Pool,
)

ANSWER = json.dumps({"meta_info": {"output_token_logprobs": [[-1.0, 5, None]]}}).encode()


class CountingServer:
    """HTTP/1.1 with keep-alive; counts connections, the most open at once, and bodies seen.
    `hang_up`: close every connection after reading its request, answering nothing."""

    def __init__(self, delay_s: float = 0.0, hang_up: bool = False) -> None:
        self.delay_s, self.hang_up = delay_s, hang_up
        self.connections = self.open = self.most_open = 0
        self.bodies: list[bytes] = []

    async def __aenter__(self) -> CountingServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.lower().split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.bodies.append(await reader.readexactly(length))
                if self.hang_up:
                    return
                await asyncio.sleep(self.delay_s)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(ANSWER) + ANSWER
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


def client(max_connections: int = 64) -> GenerateClient:
    return GenerateClient(
        connect_timeout_s=5.0, keepalive_expiry_s=4.0, max_connections=max_connections
    )


async def test_sequential_requests_reuse_one_connection_and_send_the_exact_bytes():
    gen = client()
    seen: list[tuple[str, bytes]] = []
    gen.on_request.append(lambda url, body: seen.append((url, body)))
    try:
        async with CountingServer() as server:
            for i in range(20):
                status, body = await gen.post(server.url + "/generate", b'{"i":%d}' % i, {})
                assert (status, body) == (200, ANSWER)
    finally:
        await gen.aclose()
    assert server.connections == 1  # keep-alive: no connection per request
    assert server.bodies == [b'{"i":%d}' % i for i in range(20)]
    assert seen[3] == (server.url + "/generate", b'{"i":3}')


async def test_in_flight_requests_per_worker_are_bounded_and_each_worker_has_its_own_pool():
    gen = client(max_connections=3)
    try:
        async with CountingServer(delay_s=0.05) as a, CountingServer(delay_s=0.05) as b:
            posts = [gen.post(s.url + "/generate", b"{}", {}) for s in (a, b) for _ in range(12)]
            answers = await asyncio.gather(*posts)
    finally:
        await gen.aclose()
    assert [status for status, _ in answers] == [200] * 24
    # At most 3 per worker, however many wait; each worker had all 3 (the other's don't count).
    assert a.most_open == b.most_open == 3
    assert a.connections == b.connections == 3


async def test_a_refused_connection_is_not_sent_and_a_hang_up_may_have_arrived():
    gen = client()
    try:
        async with CountingServer() as server:
            url = server.url
        with pytest.raises(GenerateNotSent):  # nothing listens there any more
            await gen.post(url + "/generate", b"{}", {})
        async with CountingServer(hang_up=True) as server:
            with pytest.raises(GenerateLost):
                await gen.post(server.url + "/generate", b'{"x":1}', {})
            assert server.bodies == [b'{"x":1}']  # it did arrive: the engine must abort it
    finally:
        await gen.aclose()


def test_max_connections_must_be_positive():
    with pytest.raises(ValueError, match="max_connections"):
        client(max_connections=0)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", (200, b"ok", True)),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nConnection: close\r\n\r\nok",
            (200, b"ok", False),
        ),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nTrailer: t\r\n\r\n",
            (503, b"abcde", True),
        ),
    ],
)
def test_answers_are_read_by_their_framing_and_only_when_whole(wire, expected):
    for cut in range(len(wire)):  # any prefix is not an answer yet
        assert _parse(bytearray(wire[:cut]), eof=False) is None
    assert _parse(bytearray(wire), eof=False) == expected


def test_an_answer_without_length_ends_with_the_connection():
    wire = b"HTTP/1.0 200 OK\r\n\r\n{}"
    assert _parse(bytearray(wire), eof=False) is None
    assert _parse(bytearray(wire), eof=True) == (200, b"{}", False)


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent():
    gen = client()
    try:
        async with CountingServer() as server:
            with pytest.raises(ValueError, match="line break"):
                await gen.post(server.url + "/generate", b"{}", {"x-key": "a\r\nHost: evil"})
        assert server.connections == 0
    finally:
        await gen.aclose()


async def test_a_request_cancelled_while_it_waits_for_a_slot_is_never_sent_nor_leaks_one():
    gen = client(max_connections=1)
    try:
        async with CountingServer(delay_s=0.05) as server:
            url = server.url + "/generate"
            holder = asyncio.ensure_future(gen.post(url, b'{"n":0}', {}))
            await asyncio.sleep(0.01)
            queued = [asyncio.ensure_future(gen.post(url, b'{"n":%d}' % i, {})) for i in (1, 2)]
            await asyncio.sleep(0.01)
            queued[0].cancel()  # waiting in the queue
            assert [(await t)[0] for t in (holder, queued[1])] == [200, 200]
            with pytest.raises(asyncio.CancelledError):
                await queued[0]
            (pool,) = gen._pools.values()
            assert pool.active == 0 and not pool.waiters  # nothing leaked
            assert server.bodies == [b'{"n":0}', b'{"n":2}']  # the cancelled one never left
            assert server.most_open == server.connections == 1  # one slot, one connection
    finally:
        await gen.aclose()


async def test_a_slot_handed_to_a_waiter_cancelled_before_it_ran_passes_on():
    """A freed slot goes to the first waiter still waiting (first come, first served); one
    cancelled after it was handed the slot but before it ran gives it to the next."""
    pool = _Pool("http://127.0.0.1:1", 1)
    pool.active = 1  # the one slot is held
    waiters = [asyncio.ensure_future(pool.wait_for_slot()) for _ in range(3)]
    await asyncio.sleep(0)  # all three queued
    waiters[0].cancel()
    await asyncio.sleep(0)  # it left the queue
    assert len(pool.waiters) == 2
    pool.release()  # handed to waiters[1] ...
    waiters[1].cancel()  # ... cancelled before it could run
    await asyncio.wait_for(waiters[2], 5)  # so the slot went on (else: never)
    assert waiters[0].cancelled() and waiters[1].cancelled()
    assert pool.active == 1 and not pool.waiters  # waiters[2] holds the one slot
    pool.release()
    assert pool.active == 0


def test_an_answer_is_parsed_the_same_from_bytes_as_from_a_buffer():
    """Most answers come in one read and are parsed where they lie (bytes); the rest build up
    in a bytearray. Both give the same answer, or None until it is whole."""
    wire = b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 5\r\nContent-Type: a\r\n\r\nhello"
    for cut in range(len(wire)):
        assert _parse(wire[:cut], eof=False) is None
    assert _parse(wire, eof=False) == _parse(bytearray(wire), eof=False) == (200, b"hello", True)
    close = b"HTTP/1.1 500 Oops\r\nconnection: Close\r\ncontent-length: 2\r\n\r\nno"
    assert _parse(close, eof=False) == (500, b"no", False)


async def test_a_waiter_cancelled_and_dropped_by_a_release_before_it_ran_leaves_cleanly():
    pool = _Pool("http://127.0.0.1:1", 1)
    pool.active = 1
    waiter = asyncio.ensure_future(pool.wait_for_slot())
    await asyncio.sleep(0)  # queued
    waiter.cancel()  # its slot future is cancelled now; its own cleanup runs later
    pool.release()  # skips the cancelled slot, nobody else waits: the slot is free
    with pytest.raises(asyncio.CancelledError):  # not a ValueError from its cleanup
        await waiter
    assert pool.active == 0 and not pool.waiters


@contextlib.asynccontextmanager
async def warm_client(n: int):
    """(client, server, url) with `n` idle keep-alive connections to the server in the pool."""
    gen = client()
    try:
        async with CountingServer() as server:
            url = server.url + "/generate"
            await asyncio.gather(*(gen.post(url, b"{}", {}) for _ in range(n)))
            yield gen, server, url
    finally:
        await gen.aclose()


async def test_requests_made_in_one_loop_turn_are_written_together():
    async with warm_client(20) as (gen, server, url):
        gen.flushes = 0
        answers = await asyncio.gather(*(gen.post(url, b'{"n":2}', {}) for _ in range(20)))
    assert answers == [(200, ANSWER)] * 20
    assert gen.flushes == 1  # one callback wrote all 20: the engine gets them as one burst
    assert server.connections == 20 and server.bodies.count(b'{"n":2}') == 20


async def test_an_idle_connection_closed_before_its_request_was_written_is_not_a_lost_request():
    gen = client()
    try:
        async with CountingServer() as server:
            url = server.url + "/generate"
            await gen.post(url, b"{}", {})
            (idle,) = gen._pools[server.url].idle
            second = asyncio.ensure_future(gen.post(url, b'{"again":1}', {}))
            await asyncio.sleep(0)  # it took the idle connection and waits for the flush...
            assert not gen._pools[server.url].idle
            assert idle.transport is not None
            idle.transport.close()  # ...which finds the server gone from it: never written
            assert await second == (200, ANSWER)  # over a new connection, not GenerateLost
    finally:
        await gen.aclose()
    assert server.connections == 2 and gen.opened == 2
    assert server.bodies == [b"{}", b'{"again":1}']  # sent once


async def test_a_new_connection_closed_before_the_request_was_written_is_not_sent():
    gen = client()
    connect = gen._connect

    async def closed_at_once(pool):
        conn = await connect(pool)
        assert conn.transport is not None
        conn.transport.close()
        return conn

    gen._connect = closed_at_once  # type: ignore[method-assign]
    try:
        async with CountingServer() as server:
            with pytest.raises(GenerateNotSent, match="before the request could be written"):
                await gen.post(server.url + "/generate", b"{}", {})
            assert server.bodies == []
    finally:
        await gen.aclose()


async def test_a_write_that_fails_fails_its_request_alone_and_the_flush_goes_on():
    async with warm_client(2) as (gen, server, url):
        broken = gen._pools[server.url].idle[-1]  # the newest: the first post takes it

        def refuse(data):
            raise RuntimeError("the transport refused it")

        assert broken.transport is not None
        broken.transport.write = refuse  # type: ignore[method-assign]
        answers = await asyncio.wait_for(
            asyncio.gather(*(gen.post(url, b"{}", {}) for _ in range(2)), return_exceptions=True),
            5.0,
        )
    assert gen.flushes >= 2
    assert isinstance(answers[0], GenerateLost) and "refused it" in str(answers[0])
    assert answers[1] == (200, ANSWER)  # written by the same flush, after the failed one
