"""bubblewrap backend: a fresh bwrap sandbox per submission over the read-only cached rootfs.

New user, pid, net, ipc, uts and cgroup namespaces; the runner is pid 1 (`--as-pid-1`), so the
program can neither signal it nor outlive it; no capabilities; no network but loopback (up,
`localhost` in the image's /etc/hosts); host environment cleared; only the rootfs (read-only),
size-capped /tmp and /dev/shm tmpfs, /proc and a minimal /dev are visible. Run as root, it first
drops to the slot's unprivileged host uid. Everything is new per submission (mounts, IPC
namespace, user namespace and so its keyrings, pid namespace), so no run sees another's state.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from sandbox.errors import SandboxUnavailable
from sandbox.isolation import image
from sandbox.isolation.backends.base import RUNNER_SOURCE, SANDBOX_UID, ProcessBackend


class BubblewrapBackend(ProcessBackend):
    name = "bubblewrap"

    def __init__(
        self, slots: int, *, tmpfs_mb: int = 256, rootfs: str | None = None, cgroups: bool = True
    ) -> None:
        super().__init__(slots, cgroups=cgroups)
        self.tmpfs_mb = tmpfs_mb
        self.rootfs = rootfs or str(image.rootfs_path())
        self.bwrap = shutil.which("bwrap") or ""
        self.setpriv = shutil.which("setpriv") or ""

    def check(self) -> None:
        if not self.bwrap:
            raise SandboxUnavailable(
                "bubblewrap backend: `bwrap` not found; apt-get install bubblewrap"
            )
        if not os.path.isdir(self.rootfs):
            raise SandboxUnavailable(
                f"bubblewrap backend: rootfs {self.rootfs} is missing; build "
                "it with `python -m sandbox doctor` (root, debootstrap)"
            )
        probe = subprocess.run(
            [*self._prefix(self.uids[0]), "/bin/true"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode != 0:
            raise SandboxUnavailable(
                "bubblewrap backend: bwrap cannot create namespaces here "
                f"({probe.stderr.strip()}); enable unprivileged user namespaces "
                "(sysctl user.max_user_namespaces>0, kernel.unprivileged_userns_clone=1)"
            )
        self.setup_cgroups()

    def _prefix(self, uid: int) -> list[str]:
        drop = []
        if os.geteuid() == 0:  # never run the sandbox as host root: become the slot's uid first
            drop = [self.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        return [
            *drop,
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--ro-bind",
            self.rootfs,
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(self.tmpfs_mb << 20),
            "--tmpfs",
            "/tmp",
            "--size",  # bwrap's own /dev/shm would be an uncapped tmpfs (half the host's RAM)
            str(self.tmpfs_mb << 20),
            "--perms",
            "1777",
            "--tmpfs",
            "/dev/shm",
            "--cap-drop",
            "ALL",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--hostname",
            "sandbox",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--chdir",
            "/tmp",
        ]

    def argv(self, slot: int) -> list[str]:
        return [*self._prefix(self.uids[slot]), "/usr/bin/python3", "-S", "-c", RUNNER_SOURCE]
