"""Docker sessions: one container per session, its pid 1 the session agent on an open pipe.

The container is the runner backend's (DockerBackend._run_argv: no network, read-only root,
capped /tmp tmpfs, pids/memory/cpu limits, an unprivileged uid, no-new-privileges, no
capabilities, private ipc, labelled with the owner host:pid) plus a size-capped /workspace tmpfs
owned by the session's uid. With a local engine and cgroups, the session's processes live in
the session's own cgroup (backends/base.py; its fds reach the agent over a unix socket mounted
at /run/gspo-ctl, as the runner's do), which caps their memory and number together and counts
their CPU; the container's own limits (memory + both tmpfs, pids) then bound the agent and what
it writes. Remote engines have only the container's limits, which cover the whole tree too.

Cleanup: closing the session closes the agent's stdin (the agent kills everything and exits,
and --rm removes the container) and then `docker rm -f`s it anyway. A trainer killed by SIGKILL
leaves the agent waiting on stdin that is now closed, so it exits by itself; a container whose
agent was busy is removed at the next start by DockerBackend.reap_stale (dead owner pid).
"""

from __future__ import annotations

import copy
import socket
import subprocess
from collections.abc import Sequence

from sandbox.isolation.backends.docker import DockerBackend, _ctl_listener, _run
from sandbox.sessions.api import WORKSPACE, SessionLimits
from sandbox.sessions.backends.base import (
    AGENT_ARGV,
    SESSION_LABEL,
    Handle,
    SessionBackend,
    close_agent,
)

PIDS_MARGIN = 4  # the agent, the kernel, bash


class DockerSessionBackend(SessionBackend):
    name = "docker"
    base: DockerBackend
    without_cgroups = "the container's memory and pids caps bound the whole tree"

    def __init__(
        self,
        *,
        image_tag: str | None = None,
        hosts: Sequence[str] | None = None,
        cpus: float = 1.0,
        cgroup_parent: str | None = "auto",
        cgroups: bool = True,
    ) -> None:
        self.base = DockerBackend(
            1,
            image_tag=image_tag,
            hosts=hosts,
            cpus=cpus,
            cgroup_parent=cgroup_parent,
            cgroups=cgroups,
        )
        self.owner = self.base.owner
        self._live: dict[str, Handle] = {}
        self._next_host = 0

    def check(self) -> None:
        self.base.check()  # engine, image on every host, cgroup parent, reap dead owners

    def open_ctl(self) -> tuple[socket.socket, str]:
        return _ctl_listener()

    def command(
        self, name: str, uid: int, limits: SessionLimits, ctl_dir: str | None
    ) -> tuple[list[str], str | None]:
        host = self.base.hosts[self._next_host % len(self.base.hosts)]
        self._next_host += 1
        shaped = copy.copy(self.base)  # the runner backend's flags, sized for this session
        shaped.memory_mb = limits.tree_memory_mb()
        shaped.pids_limit = limits.processes + PIDS_MARGIN
        shaped.tmpfs_mb = limits.tmp_mb
        argv = shaped._run_argv(name, uid, ctl_dir)  # the runner's command after the image goes
        at = len(argv) - 1 - argv[::-1].index(shaped.image)  # the image; the command follows
        extra = [
            "--label",
            SESSION_LABEL,
            "--tmpfs",
            f"{WORKSPACE}:rw,exec,nosuid,nodev,size={limits.disk_mb}m,uid={uid},gid={uid},"
            "mode=0755",
            "--workdir",
            WORKSPACE,
        ]
        return [*self.base._cli(host), *argv[:at], *extra, shaped.image, *AGENT_ARGV], host

    def registered(self, handle: Handle) -> None:
        self._live[handle.name] = handle

    async def teardown(self, handle: Handle) -> str:
        self._live.pop(handle.name, None)
        tail = await close_agent(handle.proc, grace_s=1.0)
        code, _, err = await _run([*self.base._cli(handle.host), "rm", "-f", handle.name])
        if code != 0 and "No such container" not in err:
            tail += f"\ndocker rm -f {handle.name}: {err.strip()[:300]}"
        return tail

    def destroy_all_sync(self) -> None:
        for handle in list(self._live.values()):
            subprocess.run(
                [*self.base._cli(handle.host), "rm", "-f", handle.name],
                capture_output=True,
                timeout=60,
            )
            if handle.groups is not None:
                handle.groups.close()
        self._live.clear()
