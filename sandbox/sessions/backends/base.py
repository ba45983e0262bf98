"""What the session backends share: starting the agent, talking to it, tearing it down.

A session backend starts `sandbox/sessions/agent.py` as pid 1 of a fresh sandbox (a container, a
bwrap namespace) with its stdin/stdout attached to our pipes, and destroys it at the end. The
isolation flags are the runner backends' own (sandbox/isolation/backends/docker.py, bubblewrap.py): a
session backend builds on an instance of that backend and only adds the writable /workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.errors import BackendFailure
from sandbox.isolation.backends.base import STREAM_LIMIT, stop_process
from sandbox.sessions.api import WORKSPACE, SessionLimits

_HERE = Path(__file__).resolve().parent.parent  # sandbox/sessions
AGENT_SOURCE = "\n".join(  # the agent's helpers first: inside, they are the agent's globals
    (_HERE / name).read_text() for name in ("agent_files.py", "agent.py")
)
KERNEL_SOURCE = (_HERE / "kernel.py").read_text()
AGENT_ARGV = ("/usr/bin/python3", "-S", "-c", AGENT_SOURCE)
SESSION_LABEL = "gspo-sandbox.kind=session"


@dataclass(slots=True)
class Handle:
    """One started sandbox with the agent attached and ready."""

    name: str
    uid: int
    proc: asyncio.subprocess.Process
    shape: tuple[int, int, int, int]
    host: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


class SessionBackend(ABC):
    name: str = ""

    @abstractmethod
    def check(self) -> None:
        """Raise SandboxUnavailable naming the fix; reap what dead owners left behind."""

    @abstractmethod
    def command(self, name: str, uid: int, limits: SessionLimits) -> tuple[list[str], str | None]:
        """The host command that starts the agent in a fresh sandbox, and the docker host."""

    async def start(self, name: str, uid: int, limits: SessionLimits, timeout_s: float) -> Handle:
        argv, host = self.command(name, uid, limits)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=STREAM_LIMIT,
                env=self.env(),
                start_new_session=True,  # a Ctrl-C to the trainer must not kill it mid-close
            )
        except OSError as exc:
            raise BackendFailure(f"{self.name}: cannot start a session sandbox: {exc}") from exc
        handle = Handle(name, uid, proc, limits.start_shape(), host)
        self.registered(handle)
        config = {
            "workspace": WORKSPACE,
            "kernel_source": KERNEL_SOURCE,
            "limits": {
                "memory_mb": limits.memory_mb,
                "processes": limits.processes,
                "file_bytes": limits.disk_mb << 20,
            },
        }
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(config).encode() + b"\n")
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
            ok = bool(line) and json.loads(line).get("ready") is True
        except (asyncio.TimeoutError, OSError, ValueError):
            ok = False
        except BaseException:  # cancelled (pool closing): tear it down, let it through
            await asyncio.shield(self.destroy(handle))
            raise
        if not ok:
            tail = await asyncio.shield(self.destroy(handle))
            raise BackendFailure(f"{self.name}: the session sandbox did not start: {tail}")
        return handle

    def env(self) -> dict[str, str] | None:
        return None

    def registered(self, handle: Handle) -> None:  # noqa: B027 - optional hook
        """Called as soon as the sandbox process exists (for atexit cleanup)."""

    @abstractmethod
    async def destroy(self, handle: Handle) -> str:
        """Kill the sandbox and everything in it; return the agent's stderr tail."""

    def destroy_all_sync(self) -> None:  # noqa: B027 - optional hook
        """Best-effort synchronous cleanup at interpreter exit."""


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
