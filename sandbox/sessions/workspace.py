"""One live sandbox session on the host: `SandboxSession`, the `Workspace` a `SessionPool` yields.

It speaks the session agent's line protocol (sandbox/sessions/agent.py) over the sandbox's pipes,
one call at a time, keeps the session's CPU, wall and call budget, and maps the agent's error
replies to Python exceptions. The pool that made it (sandbox/sessions/pool.py) owns its sandbox:
`aclose()` hands it back to be destroyed. The contract is in sandbox/sessions/api.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import TYPE_CHECKING, Any

from sandbox.errors import BackendFailure
from sandbox.sessions.api import (
    ExecResult,
    SessionBudgetExceeded,
    SessionClosed,
    SessionLimits,
    SessionUsage,
    Workspace,
)
from sandbox.sessions.backends.base import Handle
from sandbox.sessions.files import WorkspaceFiles, file_payload

if TYPE_CHECKING:
    from sandbox.sessions.pool import SessionPool

CALL_MARGIN_S = 15.0  # host-side backstop past a call's own limit (the agent enforces it)
_ERRORS: dict[str, type[Exception]] = {
    "FileNotFoundError": FileNotFoundError,
    "IsADirectoryError": IsADirectoryError,
    "NotADirectoryError": NotADirectoryError,
    "PermissionError": PermissionError,
    "FileExistsError": FileExistsError,
    "ValueError": ValueError,
}


class SandboxSession(WorkspaceFiles):
    """One live session (implements session_api.Workspace). Calls are serialized."""

    def __init__(self, pool: SessionPool, handle: Handle, limits: SessionLimits) -> None:
        self._pool, self._handle = pool, handle
        self.backend = pool.backend_name
        self.limits = limits
        self.name = handle.name
        self._lock = asyncio.Lock()
        self._closed = False
        self._broken = ""  # why the session can no longer be used
        self._cpu = self._wall = 0.0
        self._calls = 0
        self._exhausted = ""

    # ---- the wire ---------------------------------------------------------------------
    async def _call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._closed:
            raise SessionClosed(f"session {self.name} is closed")
        if self._broken:
            raise SessionClosed(f"session {self.name} is unusable: {self._broken}")
        proc = self._handle.proc
        assert proc.stdin is not None and proc.stdout is not None
        async with self._lock:
            done = False
            try:
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                await proc.stdin.drain()
                line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
                if not line:
                    raise BackendFailure(f"{self.backend} session {self.name}: the agent died")
                reply: dict[str, Any] = json.loads(line)
                done = True
                return reply
            except asyncio.TimeoutError as exc:
                raise BackendFailure(
                    f"{self.backend} session {self.name}: no answer within {timeout_s:.0f}s"
                ) from exc
            except (OSError, ValueError) as exc:
                raise BackendFailure(f"{self.backend} session {self.name}: {exc}") from exc
            finally:
                if not done:  # died, timed out, cancelled mid-call: the wire is out of step
                    self._broken = self._broken or "a call did not complete"

    @staticmethod
    def _raise_error(reply: dict[str, Any], path: str) -> None:
        if "error" in reply:
            kind = _ERRORS.get(str(reply.get("kind")), OSError)
            if kind is ValueError:
                raise ValueError(f"{path}: {reply['error']}")
            raise kind(reply.get("errno") or 0, str(reply["error"]), path)

    # ---- exec / python ----------------------------------------------------------------
    async def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        cpu_s: float | None = None,
        fresh: bool = False,
    ) -> ExecResult:
        return await self._run("exec", {"command": command, "fresh": fresh}, timeout_s, cpu_s)

    async def python(
        self, code: str, *, timeout_s: float | None = None, cpu_s: float | None = None
    ) -> ExecResult:
        return await self._run("python", {"code": code}, timeout_s, cpu_s)

    async def _run(
        self, op: str, body: dict[str, Any], timeout_s: float | None, cpu_s: float | None
    ) -> ExecResult:
        lim = self.limits
        if self._exhausted:
            raise SessionBudgetExceeded(f"session {self.name}: {self._exhausted}")
        wall = timeout_s if timeout_s is not None else lim.exec_timeout_s
        cpu = cpu_s if cpu_s is not None else (lim.call_cpu_s or wall)
        if not (wall > 0 and cpu > 0):
            raise ValueError(f"timeout_s={timeout_s!r} and cpu_s={cpu_s!r} must be positive")
        wall_left, cpu_left = lim.wall_s - self._wall, lim.cpu_s - self._cpu
        wall_by_budget, cpu_by_budget = wall_left < wall, cpu_left < cpu
        wall, cpu = min(wall, wall_left), min(cpu, cpu_left)
        request = {"op": op, **body, "timeout_s": wall, "cpu_s": cpu}
        request["output_bytes"] = lim.output_bytes
        reply = await self._call(request, wall + CALL_MARGIN_S)
        self._raise_error(reply, op)
        self._calls += 1
        self._cpu += float(reply["cpu_s"])
        self._wall += float(reply["wall_s"])
        reason = str(reply.get("reason") or "")
        message, exhausted = str(reply.get("message") or ""), False
        if reason == "wall":
            exhausted = wall_by_budget
            message = f"killed: wall time limit of {wall:.1f}s reached"
        elif reason == "cpu":
            exhausted = cpu_by_budget
            message = f"killed: CPU time limit of {cpu:.1f}s reached"
        elif reason == "died":
            message = f"the python kernel died (exit {reply.get('exit_code')})"
        elif reason == "control":
            message = (
                "killed: the cell wrote more than the agent reads of the kernel's control pipe "
                "(fd 4, 64 KiB a call); leave fds 3 and 4 alone"
            )
        if reply.get("kernel_restarted"):
            message += ("; " if message else "") + (
                "the python kernel was restarted, its variables are lost"
            )
        ooms = int(reply.get("oom_kills") or 0)
        if ooms:
            message += ("; " if message else "") + (
                f"out of memory: {ooms} process(es) of this call killed by the kernel (the "
                f"session's processes together may hold {lim.memory_mb} MiB, "
                f"+{lim.disk_mb + lim.tmp_mb} MiB for what they keep in /workspace and /tmp)"
            )
        if exhausted or self._cpu >= lim.cpu_s or self._wall >= lim.wall_s:
            exhausted = True
            self._exhausted = (
                f"session budget spent (cpu {self._cpu:.1f}/{lim.cpu_s:.0f}s, "
                f"wall {self._wall:.1f}/{lim.wall_s:.0f}s)"
            )
            message += ("; " if message else "") + self._exhausted
        return ExecResult(
            exit_code=reply.get("exit_code"),
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            stdout_cut=int(reply["stdout_cut"]),
            stderr_cut=int(reply["stderr_cut"]),
            wall_s=float(reply["wall_s"]),
            cpu_s=float(reply["cpu_s"]),
            timed_out=reason in ("wall", "cpu"),
            budget_exhausted=exhausted,
            kernel_restarted=bool(reply.get("kernel_restarted")),
            message=message,
            oom_killed=ooms > 0,
        )

    # ---- files --------------------------------------------------------------------------
    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        raw = file_payload(path, data, self.limits)
        request = {"op": "write", "path": path, "mode": mode}
        request["data"] = base64.b64encode(raw).decode()
        self._raise_error(await self._call(request, CALL_MARGIN_S + 30), path)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        limit = min(max_bytes or self.limits.max_file_bytes, self.limits.max_file_bytes)
        reply = await self._call({"op": "read", "path": path, "max_bytes": limit}, 60)
        self._raise_error(reply, path)
        return base64.b64decode(reply["data"])

    async def upload_tar(self, blob: bytes, dest: str = ".") -> int:
        """Unpack a tar archive (regular files and dirs) into the workspace; file count. The
        agent unpacks it inside the sandbox, so a hostile archive harms only the session."""
        if len(blob) > self.limits.disk_mb << 20:
            raise ValueError(
                f"upload: the archive is larger than the session's disk quota "
                f"({self.limits.disk_mb} MiB, SessionLimits.disk_mb)"
            )
        request = {"op": "untar", "dest": dest, "data": base64.b64encode(blob).decode()}
        reply = await self._call(request, CALL_MARGIN_S + 60)
        self._raise_error(reply, dest)
        return int(reply["files"])

    async def digests(
        self,
        *,
        root: str | None = None,
        suffix: str = "",
        skip: tuple[str, ...] = (),
        paths: list[str] | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, str | None]:
        """sha256 of regular files: every `*suffix` file under `root` (no symlink followed, dirs
        named in `skip` left out; keys relative to root), or the given `paths`. None: missing,
        unreadable, not a regular file or over max_bytes. Read by the agent, no command runs."""
        request: dict[str, Any] = {
            "op": "digest",
            "max_bytes": max_bytes or self.limits.max_file_bytes,
        }
        if root is not None:
            request.update(root=root, suffix=suffix, skip=list(skip))
        else:
            request["paths"] = list(paths or [])
        reply = await self._call(request, CALL_MARGIN_S + 120)
        self._raise_error(reply, root or "digest")
        return {str(k): (str(v) if v else None) for k, v in reply["digests"].items()}

    async def usage(self) -> SessionUsage:
        reply = await self._call({"op": "usage"}, CALL_MARGIN_S)
        self._raise_error(reply, "usage")
        return SessionUsage(self._cpu, self._wall, self._calls, int(reply["disk_bytes"]))

    async def kill_processes(self) -> None:
        self._raise_error(await self._call({"op": "kill"}, CALL_MARGIN_S + 10), "kill")

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._pool._release(self._handle)

    @property
    def closed(self) -> bool:
        return self._closed


def _implements_the_protocol(ws: SandboxSession) -> Workspace:
    return ws  # mypy checks that SandboxSession matches session_api.Workspace
