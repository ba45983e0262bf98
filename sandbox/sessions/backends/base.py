"""What the session backends share: starting the agent, talking to it, tearing it down.

A session backend starts `sandbox/sessions/agent.py` as pid 1 of a fresh sandbox (a container, a
bwrap namespace) with its stdin/stdout attached to our pipes, and destroys it at the end. The
isolation flags are the runner backends' own (sandbox/isolation/backends/docker.py, bubblewrap.py): a
session backend builds on an instance of that backend and only adds the writable /workspace.

Whole-tree limits: where the runner backend found a cgroup hierarchy, each session gets one
cgroup (sandbox/isolation/cgroups.py, the runner's slot groups with one phase, "session"); the host
writes its memory and process limits and hands the agent the fds of its control files
(inherited, or over a unix socket into a container: `open_ctl`). The agent moves every process
it starts into the group (sandbox/sessions/agent_limits.py). The group is removed with the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.errors import BackendFailure, SandboxUnavailable
from sandbox.isolation import cgroups as cgroups_mod
from sandbox.isolation.backends.base import STREAM_LIMIT, Backend, stop_process
from sandbox.isolation.backends.docker import _close_ctl, _send_groups
from sandbox.sessions.api import WORKSPACE, SessionLimits

_HERE = Path(__file__).resolve().parent.parent  # sandbox/sessions
# The judge runs' syscall filter (runner_guard's seccomp part, the very same source), installed
# in the agent before any of its own code runs: the agent, the kernel and every process of every
# call inherit it and cannot remove it, on every session backend (issue 32 T4).
_GUARD = (_HERE.parent / "isolation" / "runner_guard.py").read_text()
_GUARD = _GUARD[: _GUARD.index("\n# ---- whole-tree accounting ---")]
SECCOMP_PRELUDE = (
    "_gspo_guard = {'__name__': 'runner_guard'}\n"
    f"exec(compile({_GUARD!r}, 'runner_guard.py', 'exec'), _gspo_guard)\n"
    "_gspo_guard['install_seccomp']()\n"
    "del _gspo_guard\n"
)
AGENT_SOURCE = "\n".join(  # the agent's helpers first: inside, they are the agent's globals
    (_HERE / name).read_text()
    for name in ("agent_files.py", "agent_limits.py", "agent_calls.py", "agent.py")
)
AGENT_SOURCE = SECCOMP_PRELUDE + AGENT_SOURCE
KERNEL_SOURCE = (_HERE / "kernel.py").read_text()
AGENT_ARGV = ("/usr/bin/python3", "-S", "-c", AGENT_SOURCE)
SESSION_LABEL = "gspo-sandbox.kind=session"
PHASE = "session"  # the one group of a session's SlotGroups
CTL_PATH = "/run/gspo-ctl/sock"  # where DockerBackend._run_argv mounts the fd socket


@dataclass(slots=True)
class Handle:
    """One started sandbox with the agent attached and ready."""

    name: str
    uid: int
    proc: asyncio.subprocess.Process
    shape: tuple[int, int, int, int]
    host: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    groups: cgroups_mod.SlotGroups | None = None


class SessionBackend(ABC):
    name: str = ""
    base: Backend  # the runner backend whose flags (and cgroup hierarchy) sessions reuse
    without_cgroups = ""  # what the limits are when there is no session cgroup, in words

    @abstractmethod
    def check(self) -> None:
        """Raise SandboxUnavailable naming the fix; reap what dead owners left behind."""

    @abstractmethod
    def command(
        self,
        name: str,
        uid: int,
        limits: SessionLimits,
        ctl_dir: str | None,
        image: str | None = None,
        socket_dir: str | None = None,
    ) -> tuple[list[str], str | None]:
        """The host command that starts the agent in a fresh sandbox, and the docker host.
        `ctl_dir`: the host dir of the socket `open_ctl` made, to be mounted at CTL_PATH;
        `image`: the session's own image (prepared by `prepare`), None for the default;
        `socket_dir`: a host dir of unix sockets, bound read-only at api.SOCKET_DIR."""

    async def prepare(self, image: str | None) -> None:
        """Make `image` ready to start sessions from (docker); other backends refuse it."""
        if image:
            raise SandboxUnavailable(
                f"{self.name} sessions cannot start from the docker image {image!r} (they run on "
                "the sandbox's own root filesystem): use backend=docker"
            )

    def extra_memory_mb(self, image: str | None) -> int:
        """Memory the session's tree may hold beyond SessionLimits.tree_memory_mb (a tmpfs the
        backend fills before the session starts, e.g. an image's /testbed)."""
        return 0

    def agent_config(self, host: str | None, image: str | None) -> dict[str, Any]:
        """Extra fields of the agent's first line (`seed`: [from, to] to copy before ready;
        `path_prefix`: a directory put first on the PATH of the session's commands)."""
        return {}

    def host_uid(self, uid: int) -> int:
        """The host uid the session's processes run as (the slot's `uid` unless said here)."""
        return uid

    def open_ctl(self) -> tuple[socket.socket, str] | None:
        """A unix socket to send the cgroup fds over (docker); None: the agent inherits them."""
        return None

    def session_groups(
        self, name: str, limits: SessionLimits, extra_mb: int = 0
    ) -> cgroups_mod.SlotGroups | None:
        """The session's cgroup with its limits written, or None where there are no cgroups."""
        if self.base.hierarchy is None:
            return None
        groups = None
        try:
            groups = cgroups_mod.SlotGroups.create(self.base.hierarchy, name, (PHASE,))
            memory = limits.tree_memory_mb() + extra_mb
            groups.set_limits(PHASE, memory << 20, limits.processes)
        except OSError as exc:
            if groups is not None:
                groups.close()
            raise BackendFailure(f"{self.name}: cannot create the session's cgroup: {exc}") from exc
        return groups

    async def _new_groups(
        self, name: str, limits: SessionLimits, extra_mb: int
    ) -> cgroups_mod.SlotGroups | None:
        """session_groups in a thread. The thread runs on when the caller is cancelled: the
        groups it makes are then removed (before the cancellation goes on), not dropped with
        the lost result."""
        making = asyncio.ensure_future(
            asyncio.to_thread(self.session_groups, name, limits, extra_mb)
        )
        try:
            return await asyncio.shield(making)
        except asyncio.CancelledError:
            making.add_done_callback(_close_orphaned_groups)  # runs before wait() returns
            await asyncio.wait([making])
            raise

    async def start(
        self,
        name: str,
        uid: int,
        limits: SessionLimits,
        timeout_s: float,
        image: str | None = None,
        socket_dir: str | None = None,
    ) -> Handle:
        await self.prepare(image)
        if socket_dir is not None:
            share_socket_dir(socket_dir, self.host_uid(uid))
        groups = await self._new_groups(name, limits, self.extra_memory_mb(image))
        ctl = None
        try:
            ctl = self.open_ctl() if groups is not None else None
            argv, host = self.command(name, uid, limits, ctl[1] if ctl else None, image, socket_dir)
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=STREAM_LIMIT,
                env=self.env(),
                pass_fds=groups.fds if groups is not None and ctl is None else (),
                start_new_session=True,  # a Ctrl-C to the trainer must not kill it mid-close
            )
        except BaseException as exc:  # nothing started: the group and socket go now
            _close_ctl(*(ctl or (None, None)))
            if groups is not None:
                await asyncio.shield(asyncio.to_thread(groups.close))
            if isinstance(exc, OSError):
                raise BackendFailure(f"{self.name}: cannot start a session sandbox: {exc}") from exc
            raise
        handle = Handle(name, uid, proc, limits.start_shape(), host, groups=groups)
        self.registered(handle)
        try:
            ok = await self._handshake(handle, limits, ctl, timeout_s, image)
        except BaseException:  # cancelled (pool closing): tear it down, let it through
            await asyncio.shield(self.destroy(handle))
            raise
        finally:
            _close_ctl(*(ctl or (None, None)))
        if not ok:
            tail = await asyncio.shield(self.destroy(handle))
            raise BackendFailure(f"{self.name}: the session sandbox did not start: {tail}")
        return handle

    async def _handshake(
        self,
        handle: Handle,
        limits: SessionLimits,
        ctl: tuple[socket.socket, str] | None,
        timeout_s: float,
        image: str | None = None,
    ) -> bool:
        """Send the agent its config (and the cgroup fds), wait for its ready line."""
        proc, groups = handle.proc, handle.groups
        config = {
            "workspace": WORKSPACE,
            "kernel_source": KERNEL_SOURCE,
            "limits": {
                "memory_mb": limits.memory_mb,
                "processes": limits.processes,
                "file_bytes": limits.disk_mb << 20,
            },
            "cgroup": groups.groups[PHASE] if groups is not None else None,
            "ctl": CTL_PATH if ctl is not None else None,
            **self.agent_config(handle.host, image),
        }
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(config).encode() + b"\n")
            await proc.stdin.drain()
            if ctl is not None and groups is not None:
                await _send_groups(ctl[0], groups)
            line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
            return bool(line) and json.loads(line).get("ready") is True
        except (asyncio.TimeoutError, OSError, ValueError):
            return False

    @staticmethod
    async def release_groups(handle: Handle) -> None:
        """Remove the session's cgroup (killing whatever still runs in it)."""
        if handle.groups is not None:
            groups, handle.groups = handle.groups, None
            await asyncio.to_thread(groups.close)

    async def destroy(self, handle: Handle) -> str:
        """Kill the sandbox and everything in it; return the agent's stderr tail. The session's
        cgroup goes on every path (a failed docker CLI, a cancelled close)."""
        try:
            return await self.teardown(handle)
        finally:
            await asyncio.shield(self.release_groups(handle))

    def env(self) -> dict[str, str] | None:
        return None

    def registered(self, handle: Handle) -> None:  # noqa: B027 - optional hook
        """Called as soon as the sandbox process exists (for atexit cleanup)."""

    @abstractmethod
    async def teardown(self, handle: Handle) -> str:
        """Kill the sandbox and everything in it; return the agent's stderr tail."""

    def destroy_all_sync(self) -> None:  # noqa: B027 - optional hook
        """Best-effort synchronous cleanup at interpreter exit."""


def share_socket_dir(socket_dir: str, uid: int) -> None:
    """Give the session's uid (its own, no other process has it) the directory and its unix
    sockets: the dir r-x, each socket rw (connect needs write), nothing for other host users.
    Only sockets and read-only regular files may be in it (no symlink, no subdirectory): what
    the session can reach of the host is exactly these sockets."""
    path = Path(socket_dir)
    if not path.is_dir() or path.is_symlink():
        raise ValueError(f"socket_dir={socket_dir!r} is not a directory")
    for entry in path.iterdir():
        mode = entry.lstat().st_mode
        if not (stat.S_ISSOCK(mode) or stat.S_ISREG(mode)):
            raise ValueError(
                f"socket_dir={socket_dir!r} holds {entry.name!r}, neither a unix socket nor a "
                "regular file: the session would reach it"
            )
    own = os.geteuid()
    if own != uid:
        if own != 0:
            raise SandboxUnavailable(
                f"a socket_dir for a session that runs as uid {uid} needs root (to give it "
                "that uid alone); run the trainer as root or use backend=bubblewrap"
            )
        for entry in [path, *path.iterdir()]:
            os.chown(entry, uid, uid, follow_symlinks=False)
    for entry in path.iterdir():
        os.chmod(entry, 0o600 if stat.S_ISSOCK(entry.lstat().st_mode) else 0o400)
    os.chmod(path, 0o500)


def _close_orphaned_groups(making: asyncio.Future[cgroups_mod.SlotGroups | None]) -> None:
    if not making.cancelled() and making.exception() is None:
        groups = making.result()
        if groups is not None:
            groups.close()  # new and empty: removed at once


async def close_agent(proc: asyncio.subprocess.Process, grace_s: float = 2.0) -> str:
    """Close the agent's stdin (it then kills everything and exits), then make sure it is gone."""
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    if proc.returncode is None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), grace_s)
    return await stop_process(proc)


def uid_processes(uid: int) -> list[int]:
    """Host pids whose real uid is `uid` (a session's uid is its own: these are its processes)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(name))
                        break
        except (OSError, ValueError):
            continue
    return found


def kill_uid(uid: int, timeout_s: float = 5.0) -> bool:
    """SIGKILL every host process of `uid` until none is left; True when none is."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = uid_processes(uid)
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
