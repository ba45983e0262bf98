"""Slow clients hold a connection for a bounded time and never an admission slot (issue 32 T5).

Real HTTP against `python -m sandbox serve` (bubblewrap) in a subprocess, with a token and room
for one request (max-concurrency 1, max-queue 0). Before the fix a request counted as pending
from its headers on, and uvicorn never timed out a slow header or body: 4 authenticated
connections that sent their headers and then stalled their bodies made every legitimate /judge
get 429, for as long as they liked.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from test_sandbox_service import AB_PY, _start, _stop

TOKEN = "slow-client-test-token-0123456789"
HEADER_S, BODY_S = 2, 3  # the service's deadlines in this test (defaults: 10 s, 30 s)
PATIENCE_S = 120  # how long we wait for the service to act: generous on a loaded machine


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN)
    proc, base = _start(
        "bubblewrap",
        *("--max-concurrency", "1", "--max-queue", "0", "--token-file", str(token_file)),
        *("--header-timeout-s", str(HEADER_S), "--body-timeout-s", str(BODY_S)),
    )
    try:
        yield base
    finally:
        _stop(proc)


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=PATIENCE_S)


def _stalled_upload(url: str) -> socket.socket:
    """An authenticated /judge whose headers are complete and whose body never finishes."""
    sock = _connect(url)
    head = (
        "POST /judge HTTP/1.1\r\nHost: sandbox\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        "Content-Length: 4000\r\n\r\n"
    )
    sock.sendall(head.encode() + b'{"language": "python", ')
    return sock


def _reply_status(sock: socket.socket) -> int | None:
    """The status code the service sends on this connection (None: closed without a reply)."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    return int(data.split()[1])


def _judge(url: str) -> httpx.Response:
    body = {"language": "python", "source": AB_PY, "tests": [{"stdin": "1 2", "expected": "3"}]}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.post(url + "/judge", json=body, headers=headers, timeout=PATIENCE_S)


async def test_stalled_bodies_never_take_the_slot_and_get_408(url: str) -> None:
    stalled = [_stalled_upload(url) for _ in range(4)]
    try:
        await asyncio.sleep(0.5)  # the service has their headers and is waiting for the bodies
        replies = await asyncio.gather(*(asyncio.to_thread(_judge, url) for _ in range(2)))
        # one slot: the two legitimate requests may race each other (one 429), never lose to
        # the stalled uploads; sequentially, each one gets its run
        assert any(r.status_code == 200 for r in replies), [r.text for r in replies]
        for _ in range(3):
            reply = _judge(url)
            assert reply.status_code == 200 and reply.json()["verdict"] == "OK", reply.text
        # and the stalled uploads are answered 408 (body deadline) and closed
        codes = await asyncio.gather(*(asyncio.to_thread(_reply_status, s) for s in stalled))
        assert codes == [408] * 4, codes
    finally:
        for sock in stalled:
            sock.close()


def _trickle_headers(url: str) -> tuple[int | None, int]:
    """Send a request's headers a byte at a time until the service answers or closes."""
    sock = _connect(url)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sent = 0
    give_up = time.monotonic() + PATIENCE_S
    try:
        line = b"GET /capacity HTTP/1.1\r\nHost: sandbox\r\nX-Slow: " + b"a" * 100_000
        while time.monotonic() < give_up:
            if sel.select(0.2):
                return _reply_status(sock), sent
            try:
                sock.send(line[sent : sent + 1])
            except OSError:
                return None, sent
            sent += 1
        raise AssertionError(f"the service kept a trickling connection for {PATIENCE_S} s")
    finally:
        sel.close()
        sock.close()


def test_trickled_headers_and_silent_connections_are_cut(url: str) -> None:
    status, sent = _trickle_headers(url)
    assert status in (408, None), status
    assert sent < 1000, sent  # cut by the deadline, not by the header size limit
    silent = _connect(url)
    try:
        assert _reply_status(silent) == 408
    finally:
        silent.close()
    assert _judge(url).status_code == 200  # and the service serves on
