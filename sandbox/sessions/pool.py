"""Sandbox sessions on the host: `SessionPool`, the `Workspace` it yields, and `session()`.

    pool = SessionPool("docker", max_sessions=16, warm=2)
    async with pool.session(SessionLimits(cpu_s=120)) as ws:
        await ws.exec("echo hi")
    await pool.aclose()

or, with a process-wide pool per backend: `async with sandbox.session(limits, backend=...)`.
The contract (limits, records, errors) is in sandbox/sessions/api.py; the in-sandbox half is
sandbox/sessions/agent.py; one live session is sandbox/sessions/workspace.py's SandboxSession.
`max_sessions` is a hard cap: `session()` waits for a free slot (backpressure). `warm` sandboxes of the pool's default limits are kept started, so taking one
costs a JSON round trip; each is used by one session only and destroyed after it, so nothing
one session leaves can meet another.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import secrets
import weakref
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.isolation.backends.base import allocate_uids
from sandbox.registry import loaded_remote, remote
from sandbox.sessions.api import SessionClosed, SessionLimits
from sandbox.sessions.backends.base import Handle, SessionBackend
from sandbox.sessions.workspace import CALL_MARGIN_S, SandboxSession  # noqa: F401 - re-exported

log = logging.getLogger("sandbox.session")
SESSION_BACKENDS: tuple[str, ...] = ("auto", "docker", "bubblewrap")


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

    async def _new(
        self, limits: SessionLimits, image: str | None = None, socket_dir: str | None = None
    ) -> Handle:
        assert self._backend is not None
        uid = next(u for u in self._uids if u not in self._uids_in_use)
        self._uids_in_use.add(uid)
        name = f"gspo-ses-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            return await self._backend.start(
                name, uid, limits, self.start_timeout_s, image, socket_dir
            )
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
        socket_dir: str | None = None,
    ) -> AsyncIterator[SandboxSession]:
        """One fresh session; waits while `max_sessions` are live; closed on every exit path.
        `image` (docker; default the pool's `image`): start it from that image instead, a
        published SWE-style one with its repository at /testbed, which the session gets
        writable (backends/docker.py). `socket_dir`: a host directory of unix sockets (and
        read-only files), bound read-only at api.SOCKET_DIR and given to the session's uid
        alone (backends/base.py share_socket_dir); such a session is never a warm one."""
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
            fresh = image != self.image or socket_dir is not None
            warm = None if fresh else self._take_warm(limits)
            handle = warm or await self._new(limits, image, socket_dir)
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
    socket_dir: str | None = None,
    **pool_options: Any,
) -> AsyncIterator[SandboxSession]:
    """`async with sandbox.session(SessionLimits(...), backend="docker") as ws:` on a shared
    pool per (event loop, backend, options); close them with `await close_sessions()`.
    `image`, `socket_dir`: this session's own image (docker) and host sockets (see
    SessionPool.session).
    backend="remote" (with urls=[...], token=...) puts the session on a sandbox service."""
    if backend == "remote":  # urls=[...], token=...: a session on a sandbox service
        if image or socket_dir:
            raise ValueError(
                "remote sessions cannot start from an image= or get a socket_dir= (a file of "
                "this host) yet: use backend=docker or bubblewrap"
            )
        async with remote().session(limits, pool_options) as remote_ws:
            yield remote_ws
        return
    pools = _default_pools.setdefault(asyncio.get_running_loop(), {})
    key = repr((backend, sorted(pool_options.items())))
    pool = pools.get(key)
    if pool is None or pool._closed:
        pool = pools[key] = SessionPool(backend, **pool_options)
    async with pool.session(limits, image=image, socket_dir=socket_dir) as ws:
        yield ws


async def close_sessions() -> None:
    """Close the shared pools that `session()` made on this event loop (trainer shutdown)."""
    pools = list(_default_pools.pop(asyncio.get_running_loop(), {}).values())
    await asyncio.gather(*(p.aclose() for p in pools), return_exceptions=True)
    used = loaded_remote()
    if used is not None:
        await used.close_shared()
