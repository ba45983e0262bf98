"""Sandbox sessions on the host: `SessionPool`, the `Workspace` it yields, and `session()`.

    pool = SessionPool("docker", max_sessions=16, warm=2)
    async with pool.session(SessionLimits(cpu_s=120)) as ws:
        await ws.exec("echo hi")
    await pool.aclose()

or, with a process-wide pool per backend: `async with sandbox.session(limits, backend=...)`.
The contract (limits, records, errors) is in sandbox/sessions/api.py; the in-sandbox half is
sandbox/sessions/agent.py. `max_sessions` is a hard cap: `session()` waits for a free slot
(backpressure). `warm` sandboxes of the pool's default limits are kept started, so taking one
costs a JSON round trip; each is used by one session only and destroyed after it, so nothing
one session leaves can meet another.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import json
import logging
import os
import secrets
import weakref
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from sandbox.errors import BackendFailure, SandboxError, SandboxUnavailable
from sandbox.isolation.backends.base import allocate_uids
from sandbox.registry import loaded_remote, remote
from sandbox.sessions.api import (
    ExecResult,
    SessionBudgetExceeded,
    SessionClosed,
    SessionLimits,
    SessionUsage,
    Workspace,
)
from sandbox.sessions.backends.base import Handle, SessionBackend
from sandbox.sessions.files import WorkspaceFiles, file_payload

log = logging.getLogger("sandbox.session")
SESSION_BACKENDS: tuple[str, ...] = ("auto", "docker", "bubblewrap")
CALL_MARGIN_S = 15.0  # host-side backstop past a call's own limit (the agent enforces it)
_ERRORS: dict[str, type[Exception]] = {
    "FileNotFoundError": FileNotFoundError,
    "IsADirectoryError": IsADirectoryError,
    "NotADirectoryError": NotADirectoryError,
    "PermissionError": PermissionError,
    "FileExistsError": FileExistsError,
    "ValueError": ValueError,
}


def build_session_backend(name: str, options: dict[str, Any]) -> SessionBackend:
    """Construct and check a session backend; raise SandboxUnavailable naming the fix."""
    if name == "auto":
        reasons = []
        shared = {k: v for k, v in options.items() if k == "cgroups"}  # bubblewrap takes these
        for candidate in ("docker", "bubblewrap"):
            try:
                return build_session_backend(
                    candidate, options if candidate == "docker" else shared
                )
            except SandboxUnavailable as exc:
                reasons.append(str(exc))
        raise SandboxUnavailable("no session backend works here:\n  " + "\n  ".join(reasons))
    backend: SessionBackend
    if name == "docker":
        from sandbox.sessions.backends.docker import DockerSessionBackend

        backend = DockerSessionBackend(**options)
    elif name == "bubblewrap":
        from sandbox.sessions.backends.bubblewrap import BubblewrapSessionBackend

        backend = BubblewrapSessionBackend(**options)
    else:
        raise ValueError(f"unknown session backend {name!r}; choose one of {SESSION_BACKENDS}")
    backend.check()
    if backend.base.hierarchy is None:
        log.warning(
            "sandbox sessions on %s: no session cgroup (%s): %s; CPU is read from /proc, so a "
            "call can overshoot its CPU limit under a fork storm (cgroups need root on the host)",
            name, backend.base.cgroup_note, backend.without_cgroups,
        )  # fmt: skip
    return backend


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


class SessionPool:
    """Owns one session backend, the live-session cap, and the warm sandboxes."""

    def __init__(
        self,
        backend: str = "auto",
        *,
        max_sessions: int = 16,
        warm: int = 0,
        limits: SessionLimits | None = None,
        start_timeout_s: float = 120.0,
        image: str | None = None,
        **backend_options: Any,
    ) -> None:
        if backend not in SESSION_BACKENDS:
            raise ValueError(
                f"unknown session backend {backend!r}; choose one of {SESSION_BACKENDS}"
            )
        if max_sessions < 1 or warm < 0:
            raise ValueError(f"max_sessions={max_sessions} must be >= 1 and warm={warm} >= 0")
        self.requested = backend
        self.backend_name = backend
        self.max_sessions, self.warm = max_sessions, warm
        self.limits = limits or SessionLimits()
        self.start_timeout_s = start_timeout_s
        self.image = image  # the sessions' default image (docker; see session())
        self._options = backend_options
        self._backend: SessionBackend | None = None
        self._sem = asyncio.Semaphore(max_sessions)
        self._uids = allocate_uids(max_sessions + warm)
        self._uids_in_use: set[int] = set()
        self._idle: list[Handle] = []
        self._filling = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._live: dict[str, Handle] = {}
        self._closed = False
        self._init_lock = asyncio.Lock()
        atexit.register(self._sync_cleanup)

    @property
    def live(self) -> int:
        """Sessions in use now (warm sandboxes not counted)."""
        return len(self._live)

    async def start(self) -> None:
        """Check the backend (reaping what dead owners left) and fill the warm pool."""
        async with self._init_lock:
            if self._backend is None:
                self._backend = await asyncio.to_thread(
                    build_session_backend, self.requested, self._options
                )
                self.backend_name = self._backend.name
        self._refill()

    async def _new(self, limits: SessionLimits, image: str | None = None) -> Handle:
        assert self._backend is not None
        uid = next(u for u in self._uids if u not in self._uids_in_use)
        self._uids_in_use.add(uid)
        name = f"gspo-ses-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            return await self._backend.start(name, uid, limits, self.start_timeout_s, image)
        except BaseException:
            self._uids_in_use.discard(uid)
            raise

    def _refill(self) -> None:
        while not self._closed and len(self._idle) + self._filling < self.warm:
            self._filling += 1
            self._spawn(self._fill_one(), "warm-fill")

    async def _fill_one(self) -> None:
        try:
            handle = await self._new(self.limits, self.image)
        except (SandboxError, OSError) as exc:
            if not self._closed:
                log.warning("session pool: a warm sandbox failed to start: %s", exc)
            return
        finally:
            self._filling -= 1
        if self._closed:
            await self._destroy(handle)
        else:
            self._idle.append(handle)

    @contextlib.asynccontextmanager
    async def session(
        self,
        limits: SessionLimits | None = None,
        *,
        acquire_timeout_s: float | None = None,
        image: str | None = None,
    ) -> AsyncIterator[SandboxSession]:
        """One fresh session; waits while `max_sessions` are live; closed on every exit path.
        `image` (docker; default the pool's `image`): start it from that image instead, a
        published SWE-style one with its repository at /testbed, which the session gets
        writable (backends/docker.py)."""
        if self._closed:
            raise SessionClosed("the session pool is closed")
        limits = limits or self.limits
        if self._backend is None:
            await self.start()
        try:
            await asyncio.wait_for(self._sem.acquire(), acquire_timeout_s)
        except asyncio.TimeoutError as exc:
            raise SandboxError(
                f"no session slot free within {acquire_timeout_s}s "
                f"(max_sessions={self.max_sessions} are live)"
            ) from exc
        try:
            if self._closed:  # closed while this one waited for a slot: start nothing more
                raise SessionClosed("the session pool is closed")
            image = image or self.image  # warm sandboxes are of the pool's image
            warm = self._take_warm(limits) if image == self.image else None
            handle = warm or await self._new(limits, image)
            self._live[handle.name] = handle
            self._refill()
            ws = SandboxSession(self, handle, limits)
            try:
                yield ws
            finally:
                closing = asyncio.ensure_future(ws.aclose())
                try:
                    await asyncio.shield(closing)
                except asyncio.CancelledError:
                    await closing  # finish tearing it down, then let the cancellation through
                    raise
        finally:
            self._sem.release()

    def _take_warm(self, limits: SessionLimits) -> Handle | None:
        dead = [h for h in self._idle if h.proc.returncode is not None]
        for handle in dead:  # a warm sandbox that died while idle: clean up, start another
            self._idle.remove(handle)
            self._spawn(self._destroy(handle))
        for i, handle in enumerate(self._idle):
            if handle.shape == limits.start_shape():
                return self._idle.pop(i)
        return None

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str = "destroy") -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release(self, handle: Handle) -> None:
        self._live.pop(handle.name, None)
        await self._destroy(handle)

    async def _destroy(self, handle: Handle) -> None:
        assert self._backend is not None
        try:
            await self._backend.destroy(handle)
        finally:
            self._uids_in_use.discard(handle.uid)

    async def aclose(self) -> None:
        """Destroy every session and warm sandbox of this pool (live sessions break)."""
        self._closed = True
        for task in list(self._tasks):
            if task.get_name() == "warm-fill":  # a teardown in flight is let finish
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        handles = [*self._idle, *self._live.values()]
        self._idle.clear()
        self._live.clear()
        await asyncio.gather(*(self._destroy(h) for h in handles), return_exceptions=True)

    async def __aenter__(self) -> SessionPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _sync_cleanup(self) -> None:
        if self._backend is not None:
            self._backend.destroy_all_sync()


# The shared pools of `session()`, per event loop (a pool's semaphore and tasks belong to one).
_default_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, SessionPool]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def session(
    limits: SessionLimits | None = None,
    *,
    backend: str = "auto",
    image: str | None = None,
    **pool_options: Any,
) -> AsyncIterator[SandboxSession]:
    """`async with sandbox.session(SessionLimits(...), backend="docker") as ws:` on a shared
    pool per (event loop, backend, options); close them with `await close_sessions()`.
    `image`: this session's own image (docker; see SessionPool.session).
    backend="remote" (with urls=[...], token=...) puts the session on a sandbox service."""
    if backend == "remote":  # urls=[...], token=...: a session on a sandbox service
        if image:
            raise ValueError("remote sessions cannot start from an image= yet: use backend=docker")
        async with remote().session(limits, pool_options) as remote_ws:
            yield remote_ws
        return
    pools = _default_pools.setdefault(asyncio.get_running_loop(), {})
    key = repr((backend, sorted(pool_options.items())))
    pool = pools.get(key)
    if pool is None or pool._closed:
        pool = pools[key] = SessionPool(backend, **pool_options)
    async with pool.session(limits, image=image) as ws:
        yield ws


async def close_sessions() -> None:
    """Close the shared pools that `session()` made on this event loop (trainer shutdown)."""
    pools = list(_default_pools.pop(asyncio.get_running_loop(), {}).values())
    await asyncio.gather(*(p.aclose() for p in pools), return_exceptions=True)
    used = loaded_remote()
    if used is not None:
        await used.close_shared()


def _implements_the_protocol(ws: SandboxSession) -> Workspace:
    return ws  # mypy checks that SandboxSession matches session_api.Workspace
