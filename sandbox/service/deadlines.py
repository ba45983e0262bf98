"""Read deadlines for the service's HTTP connections: a slow client holds a socket, never a slot.

Uvicorn (h11) has no deadline for a request's headers: its keep-alive timer runs only between
requests and the first byte of the next one cancels it, so a client sending a header byte now and
then holds its connection for good. `DeadlineH11Protocol` adds one: from the moment a connection
opens, and from the first byte of each further request on it, the request's headers must be
complete within `header_timeout_s`, or the service answers 408 and closes the connection. An
idle keep-alive connection is left to uvicorn's `timeout_keep_alive` (the client expires its
own sooner, see remote.py), so no request is ever sent on a connection we are closing.

The body has its own deadline in the application (`requests.read_json`, `body_timeout_s`), and
a request is admitted (counted against max_concurrency + max_queue) only once its body is read
(server.py), so stalled uploads cannot make legitimate requests get 429. HAProxy in front
(deploy/haproxy/haproxy.cfg) enforces the same: `timeout http-request` and
`option http-buffer-request`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from sandbox.service.requests import HEADER_TIMEOUT_S

_TIMEOUT_REPLY = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: 51\r\n\r\n"
    b'{"error": "request headers not received in time"}\r\n'
)
assert len(_TIMEOUT_REPLY.split(b"\r\n\r\n", 1)[1]) == 51


class DeadlineH11Protocol(H11Protocol):
    """Uvicorn's h11 protocol with a deadline on each request's headers."""

    header_timeout_s = HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._armed_for: object = None  # the cycle current when the timer was armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        between = self.cycle is None or self.cycle.response_complete
        if between and (self._header_timer is None or self._armed_for is not self.cycle):
            self._arm()  # the first bytes of a new request: its headers are on the clock
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._armed_for = self.cycle
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.cycle is not self._armed_for or self.transport.is_closing():
            return  # the request's headers arrived in time (a new cycle started)
        self.transport.write(_TIMEOUT_REPLY)
        self.transport.close()


def with_header_timeout(header_timeout_s: float) -> type[DeadlineH11Protocol]:
    """The protocol class for uvicorn's `http=` with this header deadline."""
    return type(
        "DeadlineH11Protocol", (DeadlineH11Protocol,), {"header_timeout_s": header_timeout_s}
    )
