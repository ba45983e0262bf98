"""A session on a sandbox service: the `Workspace` API over HTTP, pinned to one service.

The session is created on the service with the most free session slots (POST /sessions; a
refused or unreachable service is skipped under the same rule as runs, sandbox/service/remote.py)
and every call goes to that service's URL for the session's whole life, with the session id in
the path and in `X-Sandbox-Session` (a load balancer in front sticks on it).

What the model causes comes back as on a local session: an ExecResult, a FileNotFoundError (or
the other file errors) for a bad path, SessionBudgetExceeded when the budget is spent. What the
infrastructure causes raises BackendFailure (a SandboxError: envs turn it into InfraError, never
a reward): the service unreachable, the connection lost mid-call, the service no longer holding
the session (restarted, drained), its sandbox broken. After one, the session is unusable.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx

from sandbox.errors import BackendFailure
from sandbox.service.fleet import Fleet, Host, NoHostAvailable
from sandbox.service.session_routes import SESSION_HEADER
from sandbox.sessions.api import (
    ExecResult,
    SessionBudgetExceeded,
    SessionClosed,
    SessionLimits,
    SessionUsage,
    Workspace,
)
from sandbox.sessions.files import WorkspaceFiles, file_payload
from sandbox.sessions.workspace import _ERRORS, CALL_MARGIN_S

if TYPE_CHECKING:
    from sandbox.service.remote import RemoteSandbox

CREATE_TIMEOUT_S = 300.0  # a cold session start on a loaded host (image, container, agent)


class RemoteWorkspace(WorkspaceFiles):
    """One session on one service (implements sandbox.sessions.api.Workspace)."""

    def __init__(self, client: httpx.AsyncClient, url: str, sid: str, info: dict[str, Any]):
        self._client, self.url, self.name = client, url, sid
        self.backend = f"remote:{info.get('backend', '')}"
        self.limits = SessionLimits(**info["limits"])
        self._lock = asyncio.Lock()
        self._broken = ""
        self._closed = False

    async def _post(self, op: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._closed:
            raise SessionClosed(f"session {self.name} is closed")
        if self._broken:
            raise SessionClosed(f"session {self.name} is unusable: {self._broken}")
        where = f"remote session {self.name} on {self.url}"
        async with self._lock:
            try:
                reply = await self._client.post(
                    f"{self.url}/sessions/{self.name}/{op}",
                    json=body,
                    headers={SESSION_HEADER: self.name},
                    timeout=httpx.Timeout(timeout_s, connect=10.0),
                )
            except httpx.HTTPError as exc:
                self._broken = f"{type(exc).__name__}: {exc}"
                raise BackendFailure(f"{where}: the service was lost ({self._broken})") from exc
        if reply.status_code == 200:
            return dict(reply.json())
        return self._raise(reply, where, str(body.get("path", op)))

    def _raise(self, reply: httpx.Response, where: str, path: str) -> dict[str, Any]:
        try:
            error = reply.json()
            kind, message = str(error.get("kind", "")), str(error.get("error", ""))
        except ValueError:
            kind, message = "", reply.text[:300]
        if reply.status_code == 409 and kind == "SessionBudgetExceeded":
            raise SessionBudgetExceeded(message)
        if reply.status_code == 400 and kind == "ValueError":
            raise ValueError(f"{path}: {message}")
        if reply.status_code == 400 and kind in _ERRORS:
            raise _ERRORS[kind](error.get("errno") or 0, message, path)
        self._broken = f"{reply.status_code} {kind}: {message}"
        raise BackendFailure(f"{where}: {self._broken}")

    def _call_timeout(self, timeout_s: float | None) -> float:
        return (timeout_s or self.limits.exec_timeout_s) + CALL_MARGIN_S + 30

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        cpu_s: float | None = None,
        fresh: bool = False,
    ) -> ExecResult:
        body = {"command": command, "timeout_s": timeout_s, "cpu_s": cpu_s, "fresh": fresh}
        return _exec_result(await self._post("exec", body, self._call_timeout(timeout_s)))

    async def python(
        self, code: str, *, timeout_s: float | None = None, cpu_s: float | None = None
    ) -> ExecResult:
        body = {"code": code, "timeout_s": timeout_s, "cpu_s": cpu_s}
        return _exec_result(await self._post("python", body, self._call_timeout(timeout_s)))

    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        raw = file_payload(path, data, self.limits)
        body = {"path": path, "data": base64.b64encode(raw).decode(), "mode": mode}
        await self._post("write_file", body, CALL_MARGIN_S + 60)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        reply = await self._post("read_file", {"path": path, "max_bytes": max_bytes}, 90)
        return base64.b64decode(reply["data"])

    async def upload_tar(self, blob: bytes, dest: str = ".") -> int:
        body = {"dest": dest, "tar": base64.b64encode(blob).decode()}
        return int((await self._post("upload", body, CALL_MARGIN_S + 120))["files"])

    async def usage(self) -> SessionUsage:
        return SessionUsage(**(await self._post("usage", {}, CALL_MARGIN_S + 30)))

    async def kill_processes(self) -> None:
        await self._post("kill", {}, CALL_MARGIN_S + 30)

    async def aclose(self) -> None:
        """Best effort: a service that is gone took the session with it (or reaps it idle)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(httpx.HTTPError):
            await self._client.delete(
                f"{self.url}/sessions/{self.name}", headers={SESSION_HEADER: self.name}
            )

    @property
    def closed(self) -> bool:
        return self._closed


def _exec_result(reply: dict[str, Any]) -> ExecResult:
    """Fields this client knows; a newer service may send more."""
    known = {f.name for f in dataclasses.fields(ExecResult)}
    return ExecResult(**{k: v for k, v in reply.items() if k in known})


@contextlib.asynccontextmanager
async def open_session(
    sandbox: RemoteSandbox, limits: SessionLimits
) -> AsyncIterator[RemoteWorkspace]:
    await sandbox.acheck()
    fleet = sandbox.fleet
    host, info = await _create(fleet, limits, sandbox.queue_timeout_s)
    ws = RemoteWorkspace(fleet.client, host.url, info["id"], info)
    host.our_sessions += 1
    try:
        yield ws
    finally:
        host.our_sessions -= 1
        await asyncio.shield(ws.aclose())


async def _create(
    fleet: Fleet, limits: SessionLimits, queue_timeout_s: float
) -> tuple[Host, dict[str, Any]]:
    """POST /sessions on the least loaded service; refused (429/503) or unreachable ones are
    skipped, then retried after a pause until queue_timeout_s; anything else raises."""
    fleet._start()
    if not any(h.checked for h in fleet.hosts):
        await fleet.refresh()
    loop = asyncio.get_running_loop()
    deadline, refused, pause = loop.time() + queue_timeout_s, set[str](), 0.5
    body = {"limits": dataclasses.asdict(limits)}
    while True:
        try:
            host = fleet.session_host(refused)
        except NoHostAvailable as exc:
            if loop.time() > deadline:
                raise BackendFailure(f"could not start a remote session: {exc}") from exc
            await asyncio.sleep(pause)
            pause = min(2 * pause, 5.0)
            refused.clear()
            await fleet.refresh()
            continue
        try:
            reply = await fleet.client.post(
                host.url + "/sessions",
                json=body,
                timeout=httpx.Timeout(CREATE_TIMEOUT_S, connect=10.0),
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            fleet.mark_down(host, f"connection failed ({type(exc).__name__})")
            refused.add(host.url)
            continue
        except httpx.HTTPError as exc:
            raise BackendFailure(f"{host.url}: session start lost ({exc!r})") from exc
        if reply.status_code in (429, 503):
            refused.add(host.url)
            continue
        if reply.status_code == 400:
            raise ValueError(f"sandbox service {host.url} refused the session: {reply.text[:300]}")
        if reply.status_code != 200:
            raise BackendFailure(f"{host.url}: session start failed: {reply.text[:300]}")
        return host, dict(reply.json())


def _implements_the_protocol(ws: RemoteWorkspace) -> Workspace:
    return ws  # mypy checks that RemoteWorkspace matches sandbox.sessions.api.Workspace
