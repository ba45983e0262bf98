"""Control calls to SGLang workers: one httpx.AsyncClient, bounded retries, errors mapped once.

Everything except /generate goes through here (probes, /health, pause, abort, weight updates,
flush). httpx exceptions become the engine's own (EngineTimeout, EngineUnavailable) at this
boundary; answers become EngineRequestError / EngineError in sglang_wire.check_success.
Not here: routing, worker state (sglang_workers.py) and the /generate path (sglang_engine.py).
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from gspo_agents.rollout.engine import EngineTimeout, EngineUnavailable
from gspo_agents.rollout.sglang_wire import check_success

log = logging.getLogger(__name__)

# Connect/read/write/protocol errors, including a keep-alive connection the server dropped.
RETRYABLE = (httpx.TransportError,)
# Errors that prove the request never left: safe to retry any call.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Sleep before retry `attempt` (1-based): exponential, capped."""
    return min(base_s * 2 ** (attempt - 1), cap_s)


class ControlClient:
    """The engine's HTTP client, with retrying helpers for control calls."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        control_timeout_s: float,
        max_attempts: int,
        backoff: tuple[float, float],
        keepalive_expiry_s: float,
        max_connections: int,
    ) -> None:
        self.connect_s = connect_timeout_s
        self.control_s = control_timeout_s
        self.attempts = max_attempts
        self.backoff = backoff
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(control_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                # Under SGLang's (uvicorn's) 5 s, so we never reuse one it is about to close.
                keepalive_expiry=keepalive_expiry_s,
            ),
        )

    async def request(
        self, url: str, method: str, path: str, body: dict | None, timeout_s: float
    ) -> httpx.Response:
        """One control call with bounded retries of errors that prove it was never sent.

        A POST is retried only when the connection could not be made: a control POST (pause, an
        update, a session begin/end, abort) is not idempotent, and one whose connection dropped
        may have reached the server (SGLang would then see it twice, e.g. a second
        /begin_weight_update, which 0.5.23 refuses). A GET is retried on any transport error."""
        failures = []
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(backoff_s(attempt, *self.backoff))
            try:
                return await self.client.request(
                    method,
                    url + path,
                    json=body,
                    timeout=httpx.Timeout(timeout_s, connect=self.connect_s),
                )
            except NOT_SENT as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            except httpx.TimeoutException as exc:
                raise EngineTimeout(f"{url}{path} timed out after {timeout_s} s") from exc
            except RETRYABLE as exc:
                if method != "GET":
                    raise EngineUnavailable(
                        f"{url}{path}: the connection failed after the request may have been "
                        f"sent ({type(exc).__name__}: {exc}); not retried (not idempotent)"
                    ) from exc
                failures.append(f"{type(exc).__name__}: {exc}")
        raise EngineUnavailable(f"{url}{path} unreachable: " + "; ".join(failures[-2:]))

    async def control(
        self, url: str, path: str, body: dict | None, timeout_s: float | None = None
    ) -> None:
        """POST `body` and raise unless the worker reports success."""
        resp = await self.request(url, "POST", path, body, timeout_s or self.control_s)
        check_success(url, path, resp)

    async def probe(
        self, url: str, path: str, timeout_s: float | None = None
    ) -> httpx.Response | None:
        """A GET; None when the worker cannot be reached. A connection the server dropped (it
        restarted) gets one more try on a fresh connection; a refused one does not."""
        timeout = httpx.Timeout(timeout_s or self.control_s, connect=self.connect_s)
        for attempt in range(2):
            try:
                return await self.client.get(url + path, timeout=timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                log.debug("GET %s%s: %r", url, path, exc)
                return None
            except RETRYABLE as exc:
                log.debug("GET %s%s (try %d): %r", url, path, attempt + 1, exc)
                if attempt:
                    return None
        return None

    async def aclose(self) -> None:
        await self.client.aclose()
