"""Sessions over HTTP: the service's half of the `remote` backend's workspaces.

    POST   /sessions                {"limits": {SessionLimits fields}} -> {"id", "backend", "limits"}
    POST   /sessions/{id}/exec      {"command", "timeout_s"?, "cpu_s"?, "fresh"?} -> ExecResult
    POST   /sessions/{id}/python    {"code", "timeout_s"?, "cpu_s"?}              -> ExecResult
    POST   /sessions/{id}/write_file {"path", "data": base64, "mode"?}            -> {}
    POST   /sessions/{id}/read_file {"path", "max_bytes"?}                         -> {"data": base64}
    POST   /sessions/{id}/upload    {"dest"?, "tar": base64}                       -> {"files"}
    POST   /sessions/{id}/usage     {}                                              -> SessionUsage
    POST   /sessions/{id}/kill      {}                                              -> {}
    DELETE /sessions/{id}                                                           -> {}

A session lives in this instance's SessionPool and nowhere else: every reply carries the
`X-Sandbox-Session` header, on which a load balancer can stick the session to its instance
(deploy/haproxy/haproxy.cfg does). An id this instance does not hold is a 404 with kind
"UnknownSession" (the client's session is lost: infrastructure, never the model's doing).

Errors are JSON {"error", "kind"[, "errno"]}: 400 for a bad request or a file error the model
caused (FileNotFoundError, ...), 409 SessionBudgetExceeded, 410 SessionClosed, 429 when
`max_sessions` are live (Retry-After), 503 while draining, 500 BackendFailure (the sandbox
broke; the session is closed here). A session nobody has called for `idle_s` is closed, so a
client that died leaks nothing. Every limit a client asks for is capped (SessionCaps).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandbox.errors import BackendFailure
from sandbox.service.requests import SlowBody
from sandbox.sessions.api import SessionBudgetExceeded, SessionClosed, SessionLimits
from sandbox.sessions.pool import SessionPool
from sandbox.sessions.workspace import SandboxSession

log = logging.getLogger("sandbox.service.sessions")
SESSION_HEADER = "X-Sandbox-Session"
DEFAULT_LIMITS = SessionLimits()


@dataclass(frozen=True, slots=True)
class SessionCaps:
    """The most a client may ask of one session (a request over them gets 400 naming it)."""

    memory_mb: int = 4096
    processes: int = 256
    disk_mb: int = 4096
    tmp_mb: int = 1024
    cpu_s: float = 7200.0
    wall_s: float = 4 * 3600.0
    exec_timeout_s: float = 3600.0
    output_bytes: int = 8 << 20
    idle_s: float = 900.0  # a session not called for this long is closed
    max_body_bytes: int = 48 << 20  # write_file / upload payloads, base64


class BadSessionRequest(ValueError):
    pass


@dataclass(slots=True)
class _Live:
    cm: Any  # the pool's session() context, entered here and left at close
    ws: SandboxSession
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0


class SessionService:
    """The live sessions of one instance, their routes, and their cleanup."""

    def __init__(self, pool: SessionPool, caps: SessionCaps | None = None) -> None:
        self.pool = pool
        self.caps = caps or SessionCaps()
        self.draining = False
        self._live: dict[str, _Live] = {}
        self._reserved = 0  # creations under way: counted against max_sessions at once
        self._reaper: asyncio.Task[None] | None = None

    @property
    def live(self) -> int:
        return len(self._live) + self._reserved

    def capacity(self) -> dict[str, Any]:
        return {
            "backend": self.pool.backend_name,
            "max_sessions": self.pool.max_sessions,
            "live": self.live,
        }

    def routes(self, read_json: Callable[[Request, int], Awaitable[dict[str, Any]]]) -> list[Route]:
        self._read_json = read_json
        return [
            Route("/sessions", self._create, methods=["POST"]),
            Route("/sessions/{sid}", self._delete, methods=["DELETE"]),
            Route("/sessions/{sid}/{op}", self._call, methods=["POST"]),
        ]

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        await self.pool.start()
        self._reaper = asyncio.get_running_loop().create_task(self._reap_idle(), name="reaper")

    async def aclose(self) -> None:
        """Drain: close every session, then the pool (in-flight calls have finished: the
        server stops taking requests and waits for them before its lifespan ends)."""
        self.draining = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*(self._close(sid) for sid in list(self._live)))
        await self.pool.aclose()

    async def _reap_idle(self) -> None:
        """Consumes nothing; every idle_s/4 closes sessions nobody called for idle_s."""
        while True:
            await asyncio.sleep(self.caps.idle_s / 4)
            now = time.monotonic()
            for sid, live in list(self._live.items()):
                if not live.busy and now - live.last_used > self.caps.idle_s:
                    log.info("closing session %s: idle for %.0f s", sid, now - live.last_used)
                    await self._close(sid)

    async def _close(self, sid: str) -> None:
        live = self._live.pop(sid, None)
        if live is not None:
            try:
                await live.cm.__aexit__(None, None, None)
            except Exception:  # noqa: BLE001 - teardown of a broken sandbox: log, go on
                log.exception("closing session %s failed", sid)

    # ---- routes ---------------------------------------------------------------------------
    async def _create(self, request: Request) -> JSONResponse:
        if self.draining:
            return _error(503, "this sandbox instance is draining", "Draining")
        try:  # the body before a reservation: a stalled upload never holds a session's place
            body = await self._read_json(request, 1 << 20)
        except SlowBody as exc:
            return _error(408, str(exc), "SlowBody")
        except ValueError as exc:
            return _error(400, str(exc), "ValueError")
        if self.live >= self.pool.max_sessions:
            return _error(
                429, f"all {self.pool.max_sessions} sessions are in use", "Full", retry=True
            )
        self._reserved += 1
        try:
            limits = parse_session_limits(body.get("limits") or {}, self.caps)
            cm = self.pool.session(limits)
            ws = await cm.__aenter__()
        except (BadSessionRequest, ValueError, TypeError) as exc:
            return _error(400, str(exc), "ValueError")
        except BackendFailure as exc:
            return _error(500, f"the session did not start: {exc}", "BackendFailure")
        finally:
            self._reserved -= 1
        sid = secrets.token_urlsafe(18)
        self._live[sid] = _Live(cm, ws)
        reply = {"id": sid, "backend": ws.backend, "limits": dataclasses.asdict(limits)}
        return JSONResponse(reply, headers={SESSION_HEADER: sid})

    async def _delete(self, request: Request) -> JSONResponse:
        sid = request.path_params["sid"]
        if sid not in self._live:
            return _unknown(sid)
        await self._close(sid)
        return JSONResponse({}, headers={SESSION_HEADER: sid})

    async def _call(self, request: Request) -> JSONResponse:
        sid, op = request.path_params["sid"], request.path_params["op"]
        live = self._live.get(sid)
        if live is None:
            return _unknown(sid)
        handler = _OPS.get(op)
        if handler is None:
            return _error(404, f"unknown session operation {op!r}; known: {sorted(_OPS)}", "")
        live.busy += 1
        try:
            try:
                body = await self._read_json(request, self.caps.max_body_bytes)
            except SlowBody as exc:
                return _error(408, str(exc), "SlowBody")
            reply = await handler(live.ws, body, self.caps)
        except BackendFailure as exc:
            await self._close(sid)
            return _error(500, str(exc), "BackendFailure")
        except SessionBudgetExceeded as exc:
            return _error(409, str(exc), "SessionBudgetExceeded")
        except SessionClosed as exc:
            return _error(410, str(exc), "SessionClosed")
        except OSError as exc:  # the model's file mistake (FileNotFoundError, ...)
            reply = {"error": exc.strerror or str(exc), "kind": type(exc).__name__}
            return JSONResponse({**reply, "errno": exc.errno}, status_code=400)
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc), "ValueError")
        finally:
            live.busy -= 1
            live.last_used = time.monotonic()
        return JSONResponse(reply, headers={SESSION_HEADER: sid})


# ---- request parsing --------------------------------------------------------------------------
def parse_session_limits(raw: Any, caps: SessionCaps) -> SessionLimits:
    if not isinstance(raw, dict):
        raise BadSessionRequest("'limits' must be a JSON object")
    known = {f.name for f in dataclasses.fields(SessionLimits)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise BadSessionRequest(f"unknown session limit(s) {unknown}; known: {sorted(known)}")
    for name, value in raw.items():
        if value is None and name == "call_cpu_s":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadSessionRequest(f"limits.{name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise BadSessionRequest(f"limits.{name} must be finite, got {value!r}")
        if isinstance(getattr(DEFAULT_LIMITS, name), int):
            if not float(value).is_integer():
                raise BadSessionRequest(f"limits.{name} must be an integer, got {value!r}")
            raw = {**raw, name: int(value)}
        cap = getattr(caps, name, None)
        if cap is not None and not value <= cap:
            raise BadSessionRequest(f"limits.{name}={value!r} is over this service's cap {cap}")
    return SessionLimits(**raw)  # checks positivity and max_file_bytes itself


def _timeouts(body: dict[str, Any], caps: SessionCaps) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in ("timeout_s", "cpu_s"):
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadSessionRequest(f"{name} must be a number, got {value!r}")
            if not 0 < value <= caps.exec_timeout_s:
                raise BadSessionRequest(f"{name}={value!r} must be in (0, {caps.exec_timeout_s}]")
        out[name] = value
    return out


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise BadSessionRequest(f"field {name!r} must be a string")
    return value


def _b64(body: dict[str, Any], name: str) -> bytes:
    try:
        return base64.b64decode(_text(body, name), validate=True)
    except binascii.Error as exc:
        raise BadSessionRequest(f"field {name!r} is not valid base64: {exc}") from exc


async def _exec(ws: SandboxSession, body: dict[str, Any], caps: SessionCaps) -> dict[str, Any]:
    fresh = body.get("fresh", False)
    if not isinstance(fresh, bool):
        raise BadSessionRequest("field 'fresh' must be a boolean")
    result = await ws.exec(_text(body, "command"), fresh=fresh, **_timeouts(body, caps))
    return dataclasses.asdict(result)


async def _python(ws: SandboxSession, body: dict[str, Any], caps: SessionCaps) -> dict[str, Any]:
    return dataclasses.asdict(await ws.python(_text(body, "code"), **_timeouts(body, caps)))


async def _write(ws: SandboxSession, body: dict[str, Any], caps: SessionCaps) -> dict[str, Any]:
    mode = body.get("mode", 0o644)
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise BadSessionRequest(f"field 'mode' must be an integer in [0, 0o7777], got {mode!r}")
    await ws.write_file(_text(body, "path"), _b64(body, "data"), mode=mode)
    return {}


async def _read(ws: SandboxSession, body: dict[str, Any], caps: SessionCaps) -> dict[str, Any]:
    limit = body.get("max_bytes")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BadSessionRequest(f"field 'max_bytes' must be a positive integer, got {limit!r}")
    data = await ws.read_file(_text(body, "path"), max_bytes=limit)
    return {"data": base64.b64encode(data).decode()}


async def _upload(ws: SandboxSession, body: dict[str, Any], caps: SessionCaps) -> dict[str, Any]:
    dest = body.get("dest", ".")
    if not isinstance(dest, str):
        raise BadSessionRequest("field 'dest' must be a string")
    return {"files": await ws.upload_tar(_b64(body, "tar"), dest)}


async def _usage(ws: SandboxSession, body: dict[str, Any], caps: SessionCaps) -> dict[str, Any]:
    return dataclasses.asdict(await ws.usage())


async def _kill(ws: SandboxSession, body: dict[str, Any], caps: SessionCaps) -> dict[str, Any]:
    await ws.kill_processes()
    return {}


_OPS: dict[str, Callable[[SandboxSession, dict[str, Any], SessionCaps], Awaitable[dict[str, Any]]]]
_OPS = {
    "exec": _exec,
    "python": _python,
    "write_file": _write,
    "read_file": _read,
    "upload": _upload,
    "usage": _usage,
    "kill": _kill,
}


def _error(status: int, message: str, kind: str, *, retry: bool = False) -> JSONResponse:
    headers = {"Retry-After": "1"} if retry else None
    return JSONResponse({"error": message, "kind": kind}, status_code=status, headers=headers)


def _unknown(sid: str) -> JSONResponse:
    return _error(
        404, f"no session {sid!r} on this instance (closed, idle-reaped, or restarted)",
        "UnknownSession",
    )  # fmt: skip
