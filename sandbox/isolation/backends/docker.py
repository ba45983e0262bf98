"""docker backend: a hard-capped pool of warm, locked-down containers, each serving runs.

Each container's pid 1 is the runner in --serve mode, attached to a `docker run -i` client we
keep open: a submission costs one JSON line each way, not a `docker exec` (~0.1-0.3 s here). Being
pid 1, the runner cannot be signalled by the programs it runs, and it kills every other process
in the container after each test.

Every container: no network, read-only root, a size-capped tmpfs /tmp (the only writable place),
pids/memory/cpu limits, an unprivileged per-container uid, no-new-privileges, all capabilities
dropped, private ipc. Containers are labelled with their owner (host:pid); at start we remove
containers (and fd-socket dirs) whose owner process (pid and start time) is gone, at close (and at
interpreter exit) our own. A start that fails or is cancelled removes its container at once.
A container that misbehaved (its runner died, a run was cancelled or timed out) is destroyed and
replaced, so nothing one submission left behind can meet the next. After every run the runner
empties the writable dirs (/tmp, /dev/shm, /dev/mqueue: chmod before delete, so modes do not
matter) and removes SysV IPC objects, then verifies both; a container it cannot verify clean is
destroyed and replaced too. Key management calls are denied by the syscall filter (the uid's
keyrings are the host's: docker has no user namespace).

Whole-tree limits: with a local engine and cgroups, each container gets a pair of cgroups
(sandbox/isolation/cgroups.py); the runner connects once, at start, to a unix socket we bind-mount into the
container and receives their fds (fds cannot be inherited through `docker run`); the socket is
gone before any program runs. Remote engines (or cgroups=False) use the runner's /proc sampling
fallback inside the container's own memory and pids caps. Several Docker hosts
(DOCKER_HOST-style URLs) may be given; containers are spread round-robin across them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import glob
import logging
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.errors import BackendFailure, SandboxUnavailable
from sandbox.isolation import cgroups as cgroups_mod
from sandbox.isolation import image
from sandbox.isolation.backends.base import (
    RUNNER_SOURCE,
    STREAM_LIMIT,
    Backend,
    Decide,
    RunnerOutput,
    drive,
    stop_process,
)

log = logging.getLogger(__name__)
LABEL = "gspo-sandbox.owner"
START_LABEL = "gspo-sandbox.owner-start"  # the owner's start time: its pid may be reused


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(slots=True)
class Container:
    name: str
    host: str | None
    uid: int
    proc: asyncio.subprocess.Process  # the attached `docker run -i` client
    stderr_tail: str = ""
    groups: cgroups_mod.SlotGroups | None = None


def _no_engine_message(host: str | None, stderr: str) -> str:
    """Names the engine that was tried: a host of sandbox.docker_hosts, DOCKER_HOST, or the
    default socket (the fix differs: the host, the variable, or starting dockerd)."""
    env_host = os.environ.get("DOCKER_HOST")
    if host:
        where, fix = host, "start dockerd there or fix sandbox.docker_hosts"
    elif env_host:
        where, fix = f"DOCKER_HOST={env_host}", "start dockerd there, or fix or unset DOCKER_HOST"
    else:
        where, fix = "the default socket", "start dockerd (e.g. `dockerd &`) or set DOCKER_HOST"
    detail = " ".join(stderr.split())[:300]
    return f"docker backend: no Docker engine at {where} ({detail}); {fix}"


class DockerBackend(Backend):
    name = "docker"
    nproc_margin = 2  # the runner (pid 1) shares the container's uid
    wipe_dirs = ("/tmp", "/dev/shm", "/dev/mqueue")  # a warm container's writable places

    def __init__(
        self,
        slots: int,
        *,
        image_tag: str | None = None,
        hosts: Sequence[str] | None = None,
        memory_mb: int = 2048,
        cpus: float = 1.0,
        pids_limit: int = 512,
        tmpfs_mb: int = 256,
        cgroup_parent: str | None = "auto",
        cgroups: bool = True,
    ) -> None:
        super().__init__(slots, cgroups=cgroups and not hosts)
        self.image = image_tag or image.image_tag()
        self.hosts: list[str | None] = list(hosts) if hosts else [None]
        self.memory_mb, self.cpus, self.pids_limit, self.tmpfs_mb = (
            memory_mb,
            cpus,
            pids_limit,
            tmpfs_mb,
        )
        # Where the containers' cgroups live. Docker's default nests them all under one
        # /docker group, which gets ONE task's CPU weight against the host's other processes:
        # on a busy host the whole pool then crawls (measured here: 2.6x slower at load 9).
        # "auto" puts each container directly under the root ("/", cgroupfs driver only), so
        # each gets the weight of one ordinary process; None keeps Docker's default.
        self.cgroup_parent = cgroup_parent
        self.docker = shutil.which("docker") or ""
        self.owner = owner_id()
        self.owner_start = cgroups_mod.start_ticks(os.getpid())
        self._idle: asyncio.Queue[Container] | None = None
        self._live: dict[str, Container] = {}
        self._uids_in_use: set[int] = set()
        self._next_host = 0
        atexit.register(self._remove_sync)

    # ---- setup -------------------------------------------------------------------------
    def _cli(self, host: str | None) -> list[str]:
        return [self.docker, "-H", host] if host else [self.docker]

    def check(self) -> None:
        """Raise SandboxUnavailable unless every host answers and has (or gets) the image."""
        if not self.docker:
            raise SandboxUnavailable(
                "docker backend: the `docker` CLI is not installed (apt-get install docker.io)"
            )
        for host in self.hosts:
            probe = subprocess.run(
                [*self._cli(host), "version", "--format", "{{.Server.Version}}"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if probe.returncode != 0:
                raise SandboxUnavailable(_no_engine_message(host, probe.stderr))
            image.ensure_image(self.image, host=host)
        if self.cgroup_parent == "auto":
            driver = subprocess.run(
                [*self._cli(self.hosts[0]), "info", "--format", "{{.CgroupDriver}}"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
            self.cgroup_parent = "/" if driver == "cgroupfs" else None
        if self.hosts != [None]:
            self.cgroup_note = "remote docker hosts: their cgroups are not ours to open"
        self.setup_cgroups()
        self.reap_stale()

    def reap_stale(self) -> None:
        """Remove labelled containers (and fd-socket dirs) whose owning process on this host no
        longer exists."""
        _reap_ctl_dirs()
        me = socket.gethostname()
        for host in self.hosts:
            listing = subprocess.run(
                [
                    *self._cli(host),
                    "ps",
                    "-a",
                    "--filter",
                    f"label={LABEL}",
                    "--format",
                    f'{{{{.ID}}}} {{{{.Label "{LABEL}"}}}} {{{{.Label "{START_LABEL}"}}}}',
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            stale = []
            for row in listing.stdout.splitlines():
                cid, owner, start = (row.split(" ", 2) + ["", ""])[:3]
                name, _, pid = owner.rpartition(":")
                if name == me and pid.isdigit() and not cgroups_mod.owner_alive(f"{pid}.{start}"):
                    stale.append(cid)
            if stale:
                log.info("removing %d stale sandbox containers", len(stale))
                subprocess.run(
                    [*self._cli(host), "rm", "-f", *stale], capture_output=True, timeout=60
                )

    # ---- pool --------------------------------------------------------------------------
    def _run_argv(self, name: str, uid: int, ctl_dir: str | None) -> list[str]:
        ctl = ["--volume", f"{ctl_dir}:/run/gspo-ctl:ro"] if ctl_dir else []
        return [
            "run",
            "-i",
            "--rm",
            "--name",
            name,
            "--label",
            f"{LABEL}={self.owner}",
            "--label",
            f"{START_LABEL}={self.owner_start}",
            "--network",
            "none",
            "--read-only",
            "--tmpfs",
            f"/tmp:rw,exec,nosuid,nodev,size={self.tmpfs_mb}m,mode=1777",
            "--pids-limit",
            str(self.pids_limit),
            "--memory",
            f"{self.memory_mb}m",
            "--memory-swap",
            f"{self.memory_mb}m",
            "--cpus",
            str(self.cpus),
            "--user",
            f"{uid}:{uid}",
            "--security-opt",
            "no-new-privileges",
            "--cap-drop",
            "ALL",
            "--ipc",
            "private",
            "--hostname",
            "sandbox",
            "--dns",  # else docker copies the host's resolv.conf (its resolver, search domains)
            "127.0.0.1",
            "--dns-search",
            ".",
            *ctl,
            "--workdir",
            "/tmp",
            *(["--cgroup-parent", self.cgroup_parent] if self.cgroup_parent else []),
            "--log-driver",
            "none",
            self.image,
            "python3",
            "-S",
            "-c",
            RUNNER_SOURCE,
            "--serve",
            *(["--ctl", "/run/gspo-ctl/sock"] if ctl_dir else []),
        ]

    async def _start_container(self, uid: int) -> Container:
        """Start a container whose pid 1 is the runner in --serve mode, attached to our pipes."""
        host = self.hosts[self._next_host % len(self.hosts)]
        self._next_host += 1
        name = f"gspo-sb-{os.getpid()}-{secrets.token_hex(4)}"
        groups, listener, ctl_dir = None, None, None
        try:
            if self.hierarchy is not None:
                try:
                    groups = cgroups_mod.SlotGroups.create(self.hierarchy, name)
                    listener, ctl_dir = _ctl_listener()
                except OSError as exc:
                    raise BackendFailure(
                        f"docker: cannot set up the container's cgroups: {exc}"
                    ) from exc
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self._cli(host),
                    *self._run_argv(name, uid, ctl_dir),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    limit=STREAM_LIMIT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise BackendFailure(f"cannot start the docker CLI: {exc}") from exc
        except BaseException:  # failed or cancelled before a container exists
            _close_ctl(listener, ctl_dir)
            if groups is not None:
                groups.close()
            self._uids_in_use.discard(uid)
            raise
        container = Container(name=name, host=host, uid=uid, proc=proc, groups=groups)
        self._live[name] = container
        try:
            if groups is not None and listener is not None:
                await _send_groups(listener, groups)
        except BaseException as exc:  # failed, or cancelled mid-start: the container goes now
            await asyncio.shield(self._remove(container))
            if isinstance(exc, (OSError, asyncio.TimeoutError)):
                raise BackendFailure(f"docker: the runner did not take its cgroups: {exc}") from exc
            raise
        finally:
            _close_ctl(listener, ctl_dir)
        return container

    async def _remove(self, container: Container) -> None:
        self._live.pop(container.name, None)
        rm = [*self._cli(container.host), "rm", "-f", container.name]
        try:
            _, _, err = await _run(rm)
            container.stderr_tail = await stop_process(container.proc)
            if "No such container" in err:  # not yet: the client, gone now, may have made it since
                await _run(rm)
        finally:  # its cgroups and uid go even when the docker CLI failed
            if container.groups is not None:
                groups, container.groups = container.groups, None
                groups.close()
            self._uids_in_use.discard(container.uid)

    async def execute(
        self, request: dict[str, Any], decide: Decide, timeout_s: float
    ) -> RunnerOutput:
        async with self.slot():
            if self._idle is None:
                self._idle = asyncio.Queue()
            # At most one container per slot: the pool's size is the hard cap on containers.
            container = self._idle.get_nowait() if not self._idle.empty() else None
            if container is None:
                # A uid no live container has (chosen without an await in between): per-uid
                # kernel limits such as RLIMIT_NPROC must never be shared by two containers.
                uid = next(u for u in self.uids if u not in self._uids_in_use)
                self._uids_in_use.add(uid)
                container = await self._start_container(uid)  # gone again if this fails
            healthy, out = False, RunnerOutput()
            try:
                try:
                    out = await asyncio.wait_for(drive(container.proc, request, decide), timeout_s)
                except asyncio.TimeoutError as exc:
                    raise BackendFailure(f"docker: runner exceeded {timeout_s:.0f}s") from exc
                # A container the runner could not verify clean is never reused.
                healthy = out.finished and out.clean
                if out.finished and not out.clean:
                    log.info("docker: replacing a container left dirty: %s", out.leftovers)
                return out
            finally:
                if healthy:
                    self._idle.put_nowait(container)
                else:  # died, timed out, cancelled mid-run or failed: never reuse it
                    await asyncio.shield(self._remove(container))
                    out.diagnostics = container.stderr_tail

    async def aclose(self) -> None:
        containers = list(self._live.values())
        await asyncio.gather(*(self._remove(c) for c in containers), return_exceptions=True)
        self._idle = None

    def _remove_sync(self) -> None:
        for container in list(self._live.values()):
            subprocess.run(
                [*self._cli(container.host), "rm", "-f", container.name],
                capture_output=True,
                timeout=60,
            )
            if container.groups is not None:
                groups, container.groups = container.groups, None
                groups.close()
        self._live.clear()


CTL_TIMEOUT_S = 60.0  # a cold container start on a loaded host takes seconds
CTL_PREFIX = "gspo-sb-ctl-"  # + owner pid.start + "-": the next start removes a dead owner's


def _ctl_listener() -> tuple[socket.socket, str]:
    """A listening unix socket in a fresh dir, to be bind-mounted into one container."""
    ctl_dir = tempfile.mkdtemp(prefix=f"{CTL_PREFIX}{cgroups_mod.owner_tag()}-")
    os.chmod(ctl_dir, 0o755)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(os.path.join(ctl_dir, "sock"))
        os.chmod(os.path.join(ctl_dir, "sock"), 0o777)  # the runner's uid must connect
        listener.listen(1)
        listener.setblocking(False)
    except OSError:
        _close_ctl(listener, ctl_dir)
        raise
    return listener, ctl_dir


def _reap_ctl_dirs() -> None:
    """Remove the fd-socket dirs of owners that died while a container was starting."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{CTL_PREFIX}*-*")):
        owner = os.path.basename(path)[len(CTL_PREFIX) :].split("-", 1)[0]
        if not cgroups_mod.owner_alive(owner):
            shutil.rmtree(path, ignore_errors=True)


def _close_ctl(listener: socket.socket | None, ctl_dir: str | None) -> None:
    if listener is not None:
        listener.close()
    if ctl_dir is not None:
        shutil.rmtree(ctl_dir, ignore_errors=True)


async def _send_groups(listener: socket.socket, groups: cgroups_mod.SlotGroups) -> None:
    """Hand the runner (the first and only peer) the cgroup fds; then the socket is closed."""
    loop = asyncio.get_running_loop()
    conn, _ = await asyncio.wait_for(loop.sock_accept(listener), CTL_TIMEOUT_S)
    with conn:
        conn.setblocking(True)
        socket.send_fds(conn, [cgroups_mod.ctl_message(groups)], groups.fds)
    with contextlib.suppress(OSError):  # the container holds its own copies now
        for fd in groups.fds:
            os.close(fd)
    groups.fds.clear()


async def _run(argv: list[str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()
