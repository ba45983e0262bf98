"""An OpenEnv server image run in the project's sandbox, for `env.kwargs.image=IMAGE`.

The container is the docker runner backend's (DockerBackend._run_argv: `--network none`, a
read-only root, a size-capped /tmp tmpfs, pids/memory/cpu limits, an unprivileged uid,
no-new-privileges, all capabilities dropped, private ipc, and the owner labels DockerBackend's
reaper keys on), with its command replaced: the image's `uvicorn` serves `app` (OpenEnv's
template: `server.app:app` from /app/env) on a unix socket in a host dir bind-mounted at
/run/openenv, instead of the template's `--host 0.0.0.0 --port 8000`. Without a network, the
client reaches it over that socket (websockets' `unix_connect`): no TCP port is opened on the
host, so no other local process can reach the server either.

One server per (image, app, limits) per process, shared by every episode (an OpenEnv server
holds one session per WebSocket): started at the first reset and health-checked (GET /health over
the socket) before it is used. It is removed by `close_servers()` (the trainer's shutdown), at
interpreter exit, when it is found dead (the next reset starts a fresh one), and, after a
SIGKILL of the trainer, by the next start's reap of dead owners' containers and socket dirs
(DockerBackend.reap_stale). A server that does not start is an InfraError naming the image and
the container's last log lines.

Not protected against: what the image's own code does inside those limits (it is the user's
environment; it gets no network and no host files but the socket dir).
"""

from __future__ import annotations

import atexit
import http.client
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from envs.errors import InfraError

SOCKET_DIR = "/run/openenv"  # inside the container
SOCKET_NAME = "server.sock"
LOG_TAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """What to run: the image, the ASGI app uvicorn serves, and the container's limits."""

    image: str
    app: str = "server.app:app"  # OpenEnv's Dockerfile template: `uvicorn server.app:app`
    app_dir: str = "/app/env"  # ... run from /app/env (its CMD does `cd /app/env`)
    memory_mb: int = 2048
    cpus: float = 1.0
    pids_limit: int = 256
    tmpfs_mb: int = 256
    read_only: bool = True  # False for a server that must write outside /tmp
    start_timeout_s: float = 120.0


class OpenEnvServer:
    """One running server container; `socket_path` is where the client connects."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.name = f"gspo-openenv-{os.getpid()}-{secrets.token_hex(4)}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._cli: list[str] = []
        self._dir: str | None = None

    @property
    def socket_path(self) -> str:
        assert self._dir is not None
        return os.path.join(self._dir, "sock", SOCKET_NAME)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the container and wait until /health answers; InfraError (and nothing left)
        when it does not."""
        try:
            self._launch()
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _launch(self) -> None:
        from sandbox.errors import SandboxError
        from sandbox.isolation.backends.docker import CTL_PREFIX, DockerBackend
        from sandbox.isolation.cgroups import owner_tag

        spec = self.spec
        backend = DockerBackend(
            1,
            image_tag=spec.image,
            memory_mb=spec.memory_mb,
            cpus=spec.cpus,
            pids_limit=spec.pids_limit,
            tmpfs_mb=spec.tmpfs_mb,
            cgroups=False,  # the server is not our runner: docker's own caps bound its tree
        )
        try:
            backend.check()  # engine, image present, cgroup parent, reap dead owners' leftovers
        except SandboxError as exc:
            raise InfraError(f"OpenEnv image {spec.image}: cannot start: {exc}") from exc
        uid = backend.uids[0]
        # the reaper removes a dead owner's dirs of this prefix (DockerBackend.reap_stale)
        self._dir = tempfile.mkdtemp(prefix=f"{CTL_PREFIX}{owner_tag()}-openenv-")
        os.chmod(self._dir, 0o755)
        sock_dir = os.path.join(self._dir, "sock")
        os.mkdir(sock_dir, 0o700)
        try:
            os.chown(sock_dir, uid, uid)  # only the server's uid (and root) may bind, connect
        except PermissionError:  # a non-root trainer (docker group): the server must bind
            os.chmod(sock_dir, 0o777)
        self._cli = backend._cli(None)
        with open(self._log_path(), "wb") as log:  # the child writes its own copy
            self.proc = subprocess.Popen(
                [*self._cli, *self._argv(backend, uid, sock_dir)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _argv(self, backend, uid: int, sock_dir: str) -> list[str]:
        """The runner backend's `docker run` flags with the server's command after the image."""
        spec = self.spec
        argv = backend._run_argv(self.name, uid, None)
        at = len(argv) - 1 - argv[::-1].index(backend.image)  # the image; the command follows
        flags = [a for a in argv[:at] if spec.read_only or a != "--read-only"]
        extra = [
            "--volume",
            f"{sock_dir}:{SOCKET_DIR}",
            "--env",
            "HOME=/tmp",  # the uid has no home; caches (HF, matplotlib) land in capped /tmp
            "--no-healthcheck",  # the template's checks port 8000, which nothing serves
            "--entrypoint",
            "uvicorn",
        ]
        socket_arg = f"{SOCKET_DIR}/{SOCKET_NAME}"
        # warnings and errors only: a log line per episode would grow without bound
        command = [
            spec.app,
            "--uds",
            socket_arg,
            "--app-dir",
            spec.app_dir,
            "--log-level",
            "warning",
        ]
        return [*flags, *extra, backend.image, *command]

    def _log_path(self) -> str:
        assert self._dir is not None
        return os.path.join(self._dir, "server.log")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self._log_path(), "rb") as f:
                text = f.read()[-20_000:].decode(errors="replace")
        except (OSError, AssertionError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.spec.start_timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.alive():
                assert self.proc is not None
                raise self._failure(f"the container exited with {self.proc.returncode}")
            try:
                status = health(self.socket_path)
                if status == 200:
                    return
                last = f"GET /health answered {status}"
            except OSError as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise self._failure(f"not healthy after {self.spec.start_timeout_s:.0f} s ({last})")

    def _failure(self, why: str) -> InfraError:
        tail = self.log_tail() or "(no output)"
        return InfraError(
            f"OpenEnv image {self.spec.image} (app {self.spec.app}): {why}; "
            f"the container's last log lines:\n{tail}"
        )

    def stop(self) -> None:
        """Remove the container and its socket dir; safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None:
            subprocess.run(
                [*self._cli, "rm", "-f", self.name], capture_output=True, timeout=60, check=False
            )
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("openenv", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def health(path: str, timeout_s: float = 5.0) -> int:
    """GET /health over the server's unix socket; its HTTP status."""
    conn = _UnixHTTPConnection(path, timeout_s)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    finally:
        conn.close()


_servers: dict[ServerSpec, OpenEnvServer] = {}
_lock = threading.Lock()


def live_server(spec: ServerSpec) -> OpenEnvServer | None:
    """The running server for `spec`, if there is one (never blocks: for the event loop)."""
    server = _servers.get(spec)
    return server if server is not None and server.alive() else None


def shared_server(spec: ServerSpec) -> OpenEnvServer:
    """This process's running server for `spec`, started (blocking) if there is none or the
    last one died. Call it from a thread (`asyncio.to_thread`) inside an event loop."""
    with _lock:
        server = _servers.get(spec)
        if server is not None and server.alive():
            return server
        if server is not None:  # died: its container and dir go before a fresh one starts
            server.stop()
            del _servers[spec]
        server = OpenEnvServer(spec)
        server.start()
        _servers[spec] = server
        return server


@atexit.register
def close_servers() -> None:
    """Stop every server this process started (trainer shutdown; also run at exit)."""
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.stop()
