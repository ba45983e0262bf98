"""Docker sessions: one container per session, its pid 1 the session agent on an open pipe.

The container is the runner backend's (DockerBackend._run_argv: no network, read-only root,
capped /tmp tmpfs, pids/memory/cpu limits, an unprivileged uid, no-new-privileges, no
capabilities, private ipc, labelled with the owner host:pid) plus a size-capped /workspace tmpfs
owned by the session's uid. With a local engine and cgroups, the session's processes live in
the session's own cgroup (backends/base.py; its fds reach the agent over a unix socket mounted
at /run/gspo-ctl, as the runner's do), which caps their memory and number together and counts
their CPU; the container's own limits (memory + both tmpfs, pids) then bound the agent and what
it writes. Remote engines have only the container's limits, which cover the whole tree too.

A session's own `image` (`pool.session(limits, image=...)`) is another image, a published
SWE-style one with its repository at /testbed (sandbox/sessions/images.py prepares it once): the same flags, plus a size-capped
/testbed tmpfs owned by the session's uid that the agent fills with the image's tree before it
reports ready (the tree's size as we measured it, capped, + disk_mb; the memory caps grow by
it), the agent and its python kernel on the sandbox image's python mounted read-only from a
volume (never a program of the image), and the PATH starting at the python that has the
repository's dependencies.

Cleanup: closing the session closes the agent's stdin (the agent kills everything and exits,
and --rm removes the container) and then `docker rm -f`s it anyway. A trainer killed by SIGKILL
leaves the agent waiting on stdin that is now closed, so it exits by itself; a container whose
agent was busy is removed at the next start by DockerBackend.reap_stale (dead owner pid).
"""

from __future__ import annotations

import asyncio
import copy
import socket
import subprocess
from collections.abc import Sequence

from sandbox.errors import SandboxUnavailable
from sandbox.isolation.backends.docker import DockerBackend, _ctl_listener, _run
from sandbox.sessions.api import SOCKET_DIR, WORKSPACE, SessionLimits
from sandbox.sessions.backends.base import (
    AGENT_ARGV,
    SESSION_LABEL,
    Handle,
    SessionBackend,
    close_agent,
)
from sandbox.sessions.images import (
    SEED_DIR,
    TESTBED,
    PreparedImage,
    interpreter_argv,
    interpreter_mounts,
    prepare_image,
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
        self.prepared: dict[tuple[str | None, str], PreparedImage] = {}  # (host, image)
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

    async def prepare(self, image: str | None) -> None:
        for host in self.base.hosts if image else ():
            if (host, image) not in self.prepared:
                assert image is not None
                prepared = await asyncio.to_thread(prepare_image, image, host)
                self.prepared[host, image] = prepared

    def extra_memory_mb(self, image: str | None) -> int:
        sizes = [p.testbed_mb for (_, name), p in self.prepared.items() if name == image]
        return max(sizes, default=0) if image else 0

    def agent_config(self, host: str | None, image: str | None) -> dict[str, object]:
        if not image:
            return {}
        prepared = self.prepared[host, image]
        return {
            "seed": [SEED_DIR, TESTBED],
            "path_prefix": prepared.bin_dir,
            "python_argv": interpreter_argv(),  # the kernel runs on our python too
        }

    def open_ctl(self) -> tuple[socket.socket, str]:
        return _ctl_listener()

    def command(
        self,
        name: str,
        uid: int,
        limits: SessionLimits,
        ctl_dir: str | None,
        image: str | None = None,
        socket_dir: str | None = None,
    ) -> tuple[list[str], str | None]:
        host = self.base.hosts[self._next_host % len(self.base.hosts)]
        self._next_host += 1
        if socket_dir and host and not host.startswith("unix://"):
            raise SandboxUnavailable(
                f"a session with a socket_dir needs a local Docker engine (the socket is a file "
                f"of this host), not DOCKER_HOST={host}"
            )
        shaped = copy.copy(self.base)  # the runner backend's flags, sized for this session
        shaped.memory_mb = limits.tree_memory_mb() + self.extra_memory_mb(image)
        shaped.pids_limit = limits.processes + PIDS_MARGIN
        shaped.tmpfs_mb = limits.tmp_mb
        prepared = self.prepared[host, image] if image else None
        agent: list[str] = list(AGENT_ARGV)
        extra_image: list[str] = []
        if prepared is not None:
            shaped.image = prepared.tag
            ours = interpreter_argv()  # our python, never the image's (images.py)
            agent = [*ours[1:], "-I", *AGENT_ARGV[1:]]  # the loader is the entrypoint
            extra_image = [
                "--tmpfs",
                f"{TESTBED}:rw,exec,nosuid,nodev,size={prepared.testbed_mb + limits.disk_mb}m,"
                f"uid={uid},gid={uid},mode=0755",
                *interpreter_mounts(prepared.volume),
                "--entrypoint",
                ours[0],
            ]
        argv = shaped._run_argv(name, uid, ctl_dir)  # the runner's command after the image goes
        at = len(argv) - 1 - argv[::-1].index(shaped.image)  # the image; the command follows
        extra = [
            *extra_image,
            "--label",
            SESSION_LABEL,
            *(["--volume", f"{socket_dir}:{SOCKET_DIR}:ro"] if socket_dir else []),
            "--tmpfs",
            f"{WORKSPACE}:rw,exec,nosuid,nodev,size={limits.disk_mb}m,uid={uid},gid={uid},"
            "mode=0755",
            "--workdir",
            WORKSPACE,
        ]
        return [*self.base._cli(host), *argv[:at], *extra, shaped.image, *agent], host

    def registered(self, handle: Handle) -> None:
        self._live[handle.name] = handle

    async def teardown(self, handle: Handle) -> str:
        self._live.pop(handle.name, None)
        tail = await close_agent(handle.proc, grace_s=1.0)
        cli = self.base._cli(handle.host)
        code, _, err = await _run([*cli, "rm", "-f", handle.name])
        if code != 0 and "already in progress" in err:
            # --rm's own removal raced ours (the container had just exited): wait for it, so
            # that a closed session has no container left, as the cleanup contract says
            for _ in range(120):
                if (await _run([*cli, "container", "inspect", handle.name]))[0] != 0:
                    return tail
                await asyncio.sleep(0.25)
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
