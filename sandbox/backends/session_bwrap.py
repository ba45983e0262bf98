"""bubblewrap sessions: one bwrap namespace per session, its pid 1 the session agent.

The flags are the runner backend's (BubblewrapBackend._prefix: new user/pid/net/ipc/uts/cgroup
namespaces, no capabilities, cleared environment, the slot's unprivileged host uid, capped /tmp,
--die-with-parent) with one change: instead of the read-only rootfs bound at `/`, each of its
top-level entries is bound read-only into bwrap's own root, so that a size-capped /workspace
tmpfs can be mounted there; the root is then remounted read-only.

Cleanup: closing the session closes the agent's stdin (it kills everything and exits, taking the
namespace with it); bwrap is killed if it has not exited within a second. A SIGKILLed trainer takes its
sessions with it (--die-with-parent); nothing is left for the next start to reap.
Whole-tree memory is bounded per process (RLIMIT_AS) times the process cap; a cgroup would bound
it for the tree (the integrity issue's work), processes by RLIMIT_NPROC of the session's uid.
"""

from __future__ import annotations

import contextlib
import os
import signal

from sandbox.backends.bubblewrap import BubblewrapBackend
from sandbox.backends.session_base import AGENT_ARGV, Handle, SessionBackend, close_agent
from sandbox.session_api import WORKSPACE, SessionLimits


class BubblewrapSessionBackend(SessionBackend):
    name = "bubblewrap"

    def __init__(self, *, rootfs: str | None = None) -> None:
        self.base = BubblewrapBackend(1, rootfs=rootfs)
        self._live: dict[str, Handle] = {}

    def check(self) -> None:
        self.base.check()

    def _root_binds(self) -> list[str]:
        root = self.base.rootfs
        out: list[str] = []
        for entry in sorted(os.listdir(root)):
            path = os.path.join(root, entry)
            if os.path.islink(path):
                out += ["--symlink", os.readlink(path), f"/{entry}"]
            elif os.path.isdir(path) and entry not in ("proc", "dev", "tmp"):
                out += ["--ro-bind", path, f"/{entry}"]
        return out

    def command(self, name: str, uid: int, limits: SessionLimits) -> tuple[list[str], str | None]:
        shaped = BubblewrapBackend(1, tmpfs_mb=limits.tmp_mb, rootfs=self.base.rootfs)
        prefix = shaped._prefix(uid)
        for i in range(len(prefix) - 2):
            if prefix[i : i + 3] == ["--ro-bind", self.base.rootfs, "/"]:
                prefix[i : i + 3] = self._root_binds()
                break
        else:
            raise RuntimeError("bubblewrap session: the runner's bwrap prefix has no rootfs bind")
        extra = [
            "--size",
            str(limits.disk_mb << 20),
            "--tmpfs",
            WORKSPACE,
            "--remount-ro",
            "/",
            "--chdir",
            WORKSPACE,
        ]
        return [*prefix, *extra, *AGENT_ARGV], None

    def env(self) -> dict[str, str]:
        return self.base.env()

    def registered(self, handle: Handle) -> None:
        self._live[handle.name] = handle

    async def destroy(self, handle: Handle) -> str:
        self._live.pop(handle.name, None)
        # bwrap is killed if the agent does not exit; --die-with-parent then kills the agent
        return await close_agent(handle.proc, grace_s=1.0)

    def destroy_all_sync(self) -> None:
        for handle in list(self._live.values()):
            if handle.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(handle.proc.pid, signal.SIGKILL)
        self._live.clear()
