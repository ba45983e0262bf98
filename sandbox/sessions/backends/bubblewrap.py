"""bubblewrap sessions: one bwrap namespace per session, its pid 1 the session agent.

The flags are the runner backend's (BubblewrapBackend._prefix: new user/pid/net/ipc/uts/cgroup
namespaces, no capabilities, cleared environment, the slot's unprivileged host uid, capped /tmp,
--die-with-parent) with one change: instead of the read-only rootfs bound at `/`, each of its
top-level entries is bound read-only into bwrap's own root, so that a size-capped /workspace
tmpfs can be mounted there; the root is then remounted read-only.

Cleanup: closing the session closes the agent's stdin (it kills everything and exits, taking the
namespace with it, even mid-call); then every host process of the session's uid (its own) is
killed. --die-with-parent alone is not enough: bwrap's child drops its uid after setting its
parent-death signal, which clears it. A trainer killed by SIGKILL closes the agents' stdin, so
they exit; in case one does not, each live session has a marker file <pid>.<uid> in
$TMPDIR/gspo-sessions, and the next start kills the processes of markers whose pid is dead,
unless a live process holds that uid's block (uid blocks are unique across the host's processes:
isolation/backends/base.py allocate_uids), which then owns whatever runs as it.
Whole-tree limits: with cgroups (root) the session's cgroup (backends/base.py), whose control-file
fds the agent inherits through bwrap, caps memory and process count of the tree and counts its
CPU; without, memory is bounded per process (RLIMIT_AS) only, processes by RLIMIT_NPROC of the
session's uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import signal
import tempfile
from pathlib import Path

from sandbox.isolation.backends.base import reapable_uid
from sandbox.isolation.backends.bubblewrap import BubblewrapBackend
from sandbox.isolation.cgroups import pid_alive
from sandbox.sessions.api import SOCKET_DIR, WORKSPACE, SessionLimits
from sandbox.sessions.backends.base import (
    AGENT_ARGV,
    Handle,
    SessionBackend,
    close_agent,
    kill_uid,
)

log = logging.getLogger(__name__)


def marker_dir() -> Path:
    return Path(tempfile.gettempdir()) / "gspo-sessions"


class BubblewrapSessionBackend(SessionBackend):
    name = "bubblewrap"
    base: BubblewrapBackend
    without_cgroups = "memory is capped per process only (RLIMIT_AS), not for the whole tree"

    def __init__(self, *, rootfs: str | None = None, cgroups: bool = True) -> None:
        self.base = BubblewrapBackend(1, rootfs=rootfs, cgroups=cgroups)
        self._live: dict[str, Handle] = {}

    def check(self) -> None:
        self.base.check()
        self.reap_stale()

    def reap_stale(self) -> None:
        """Kill the sessions of trainers that died without closing them (marker files)."""
        try:
            markers = list(marker_dir().glob("*.*"))
        except OSError:
            return
        for marker in markers:
            pid, _, uid = marker.name.partition(".")
            if not (pid.isdigit() and uid.isdigit()) or pid_alive(int(pid)):
                continue
            with reapable_uid(int(uid)) as ok:
                if not ok:  # a live process holds the uid's block: they are its sessions
                    log.info("not reaping uid %s of dead pid %s: a live pool has it", uid, pid)
                    continue  # (its owner reaps what the dead one left when it starts)
                log.info("reaping the bubblewrap session of dead trainer pid %s (uid %s)", pid, uid)
                if kill_uid(int(uid)):
                    marker.unlink(missing_ok=True)

    def _marker(self, handle: Handle) -> Path:
        return marker_dir() / f"{os.getpid()}.{handle.uid}"

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

    def command(
        self,
        name: str,
        uid: int,
        limits: SessionLimits,
        ctl_dir: str | None,
        image: str | None = None,
        socket_dir: str | None = None,
    ) -> tuple[list[str], str | None]:
        shaped = copy.copy(self.base)  # not a new backend: that would take a uid block a start
        shaped.tmpfs_mb = limits.tmp_mb
        prefix = shaped._prefix(uid)
        for i in range(len(prefix) - 2):
            if prefix[i : i + 3] == ["--ro-bind", self.base.rootfs, "/"]:
                prefix[i : i + 3] = self._root_binds()
                break
        else:
            raise RuntimeError("bubblewrap session: the runner's bwrap prefix has no rootfs bind")
        if "--chdir" in prefix:  # bwrap warns about a second --chdir: replace the runner's
            at = prefix.index("--chdir")
            del prefix[at : at + 2]
        extra = [
            "--size",
            str(limits.disk_mb << 20),
            "--tmpfs",
            WORKSPACE,
            *(["--ro-bind", socket_dir, SOCKET_DIR] if socket_dir else []),
            "--remount-ro",
            "/",
            "--chdir",
            WORKSPACE,
        ]
        return [*prefix, *extra, *AGENT_ARGV], None

    def env(self) -> dict[str, str]:
        return self.base.env()

    def host_uid(self, uid: int) -> int:
        return uid if os.geteuid() == 0 else os.geteuid()  # unprivileged: no setpriv (ours)

    def registered(self, handle: Handle) -> None:
        self._live[handle.name] = handle
        with contextlib.suppress(OSError):
            marker_dir().mkdir(mode=0o700, exist_ok=True)
            self._marker(handle).touch()

    async def teardown(self, handle: Handle) -> str:
        self._live.pop(handle.name, None)
        tail = await close_agent(handle.proc, grace_s=1.0)
        if await asyncio.to_thread(kill_uid, handle.uid):
            self._marker(handle).unlink(missing_ok=True)
        return tail

    def destroy_all_sync(self) -> None:
        for handle in list(self._live.values()):
            if handle.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(handle.proc.pid, signal.SIGKILL)
            if kill_uid(handle.uid):
                self._marker(handle).unlink(missing_ok=True)
            if handle.groups is not None:
                handle.groups.close()
        self._live.clear()
