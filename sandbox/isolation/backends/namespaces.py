"""namespaces backend: util-linux `unshare` + chroot into the read-only cached rootfs.

Needs root on the host (it mounts inside its private mount namespace, then drops to the slot's
unprivileged uid with no capabilities and no-new-privs). New pid, net, mount, ipc, uts and cgroup
namespaces; the runner is pid 1 of its pid namespace, so the program cannot signal or outlive it;
the host environment is cleared; only the rootfs (read-only), size-capped /tmp and /dev/shm, /proc
and a few device nodes are visible; loopback is up, nothing else. Mounts and the IPC namespace
are new per submission; there is no user namespace, so the slot's host uid has one user keyring
for all its runs, which is why the syscall filter denies every key management call. The sandbox
dies with the host process (setpriv --pdeathsig on unshare, unshare --kill-child, and the runner's
own PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from sandbox.errors import SandboxUnavailable
from sandbox.isolation import image
from sandbox.isolation.backends.base import RUNNER_SOURCE, ProcessBackend

# Runs as root inside the new namespaces, before the program exists; $1 rootfs, $2 uid,
# $3 tmpfs size, $4 the command's first word onwards.
SETUP = r"""
set -e
R=$1; U=$2; SIZE=$3; shift 3
mount --make-rprivate /
mount --bind "$R" "$R"
mount -o remount,bind,ro,nosuid,nodev "$R"
mount -t tmpfs -o "size=$SIZE,mode=1777,nosuid,nodev" tmpfs "$R/tmp"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount -t tmpfs -o size=64k,mode=755,nosuid tmpfs "$R/dev"
for d in null zero full random urandom; do
  touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"
done
ln -s /proc/self/fd "$R/dev/fd"
mkdir "$R/dev/shm"
mount -t tmpfs -o "size=$SIZE,mode=1777,nosuid,nodev" tmpfs "$R/dev/shm"
mount -o remount,ro,nosuid "$R/dev"
ip link set lo up
hostname sandbox
cd /
exec chroot "$R" /usr/bin/setpriv --reuid="$U" --regid="$U" --clear-groups --no-new-privs \
  --inh-caps=-all --bounding-set=-all -- /usr/bin/env -i PATH=/usr/bin:/bin LANG=C.UTF-8 \
  HOME=/tmp "$@"
"""


class NamespacesBackend(ProcessBackend):
    name = "namespaces"

    def __init__(
        self, slots: int, *, tmpfs_mb: int = 256, rootfs: str | None = None, cgroups: bool = True
    ) -> None:
        super().__init__(slots, cgroups=cgroups)
        self.tmpfs_mb = tmpfs_mb
        self.rootfs = rootfs or str(image.rootfs_path())
        self.unshare = shutil.which("unshare") or ""
        self.setpriv = shutil.which("setpriv") or ""

    def check(self) -> None:
        if os.geteuid() != 0:
            raise SandboxUnavailable(
                "namespaces backend: needs root (it mounts a private root and "
                "then drops privileges); use backend='bubblewrap' instead"
            )
        if not self.unshare or not self.setpriv:
            raise SandboxUnavailable(
                "namespaces backend: util-linux `unshare` and `setpriv` are needed"
            )
        if not shutil.which("ip"):
            raise SandboxUnavailable(
                "namespaces backend: `ip` (iproute2) is needed to bring loopback up; "
                "apt-get install iproute2"
            )
        if not os.path.isdir(self.rootfs):
            raise SandboxUnavailable(
                f"namespaces backend: rootfs {self.rootfs} is missing; build "
                "it with `python -m sandbox doctor` (root, debootstrap)"
            )
        probe = subprocess.run(
            [*self._prefix(self.uids[0]), "/bin/true"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode != 0:
            raise SandboxUnavailable(
                "namespaces backend: unshare failed here: " + probe.stderr.strip()[-500:]
            )
        self.setup_cgroups()

    def _prefix(self, uid: int) -> list[str]:
        return [
            self.setpriv,  # unshare dies with us; it takes the sandbox with it (--kill-child)
            "--pdeathsig",
            "KILL",
            "--",
            self.unshare,
            "--pid",
            "--fork",
            "--kill-child",
            "--net",
            "--mount",
            "--ipc",
            "--uts",
            "--cgroup",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            SETUP,
            "sandbox-setup",
            self.rootfs,
            str(uid),
            f"{self.tmpfs_mb}m",
        ]

    def argv(self, slot: int) -> list[str]:
        return [*self._prefix(self.uids[slot]), "/usr/bin/python3", "-S", "-c", RUNNER_SOURCE]
