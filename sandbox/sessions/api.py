"""The contract of sandbox sessions: limits, result records, errors and the `Workspace` protocol.

A session is one isolated, persistent workspace (an episode's scratch machine):

    async with sandbox.session(limits=SessionLimits(cpu_s=60), backend="docker") as ws:
        await ws.upload("tasks/repo7", "repo")           # a directory tree -> /workspace/repo
        r = await ws.exec("cd repo && python -m pytest -q", timeout_s=30)
        r.exit_code, r.stdout, r.stderr, r.wall_s, r.cpu_s, r.timed_out
        await ws.python("x = 41")                          # a kernel: variables persist
        (await ws.python("x + 1")).stdout                  # '42\\n'

Files persist for the session's life; so do the shell's cwd and exported variables between
`exec` calls, and the kernel's globals between `python` calls. No process outlives the call that
started it (every process but the agent and the kernel is killed after each call, and the kernel
with its threads is stopped until the next `python` call), so CPU is accounted for the whole
process tree of a call, including children it never waited for and threads left running.

What the model causes is reported, never raised: a timeout, a non-zero exit, an exception in the
kernel, output past the cap, a full disk. Two things raise:
  SessionBudgetExceeded  the session's total CPU or wall budget is spent (the model's doing: end
                         the episode, flag it; the call that crossed the line came back with
                         `budget_exhausted=True` first)
  BackendFailure         the sandbox itself broke (container died, agent crashed): infrastructure,
                         never a reward of 0; the session is unusable afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from sandbox.errors import SandboxError

WORKSPACE = "/workspace"  # the session's writable directory inside the sandbox (also $HOME)
# Where a session's `socket_dir` (SessionPool.session) appears inside, read-only: the one host
# directory a session can be given, holding unix sockets of services the host chose to offer
# (the trainer's OpenAI endpoint, pinned to the episode). No network comes with it.
SOCKET_DIR = "/gspo-host"


class SessionClosed(SandboxError):
    """A call on a session that was closed (or broke, or was cancelled mid-call)."""


class SessionBudgetExceeded(SandboxError):
    """The session's total CPU or wall budget is spent; no further calls are accepted."""


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """Per-call defaults and per-session budgets. Sizes in MiB, times in seconds."""

    exec_timeout_s: float = 30.0  # default wall limit of one exec/python call
    call_cpu_s: float | None = None  # CPU of one call's whole process tree; None: = its timeout
    output_bytes: int = 64 << 10  # stdout and stderr caps per call (the tail is kept)
    memory_mb: int = 1024  # all processes together (+ room for the tmpfs); each one (RLIMIT_AS)
    processes: int = 64  # processes/threads alive at once in the session
    disk_mb: int = 256  # size of /workspace (a tmpfs); writes past it fail with ENOSPC
    tmp_mb: int = 64  # size of /tmp
    cpu_s: float = 600.0  # total CPU budget of the session (all calls, whole trees)
    wall_s: float = 1800.0  # total wall time of the session's calls
    max_file_bytes: int = 16 << 20  # largest read_file/download/write_file payload

    def __post_init__(self) -> None:
        for name in (
            "exec_timeout_s",
            "output_bytes",
            "memory_mb",
            "processes",
            "disk_mb",
            "tmp_mb",
            "cpu_s",
            "wall_s",
            "max_file_bytes",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"SessionLimits.{name}={value!r} must be positive")
        if self.max_file_bytes > 32 << 20:
            raise ValueError(
                f"SessionLimits.max_file_bytes={self.max_file_bytes} is over 32 MiB; move "
                "bigger data with upload() of a directory"
            )
        if self.call_cpu_s is not None and not self.call_cpu_s > 0:
            raise ValueError(f"SessionLimits.call_cpu_s={self.call_cpu_s!r} must be > 0 or None")

    def tree_memory_mb(self) -> int:
        """The memory cap of the session's process tree: what its processes hold plus what they
        write into /workspace and /tmp (tmpfs pages are charged to the writer's cgroup), so a
        full disk never takes memory from the processes."""
        return self.memory_mb + self.disk_mb + self.tmp_mb

    def start_shape(self) -> tuple[int, int, int, int]:
        """What is fixed when the sandbox starts (warm sessions are pooled by it)."""
        return (self.memory_mb, self.processes, self.disk_mb, self.tmp_mb)


@dataclass(frozen=True, slots=True)
class ExecResult:
    """One `exec` (a shell command) or `python` (kernel) call."""

    exit_code: int | None  # None: killed (timeout, budget); python: 0 ok, 1 exception
    stdout: str  # the last `output_bytes` when cut
    stderr: str
    stdout_cut: int  # bytes dropped from the front of stdout (0: complete)
    stderr_cut: int
    wall_s: float
    cpu_s: float  # CPU of the call's whole process tree (user + system)
    timed_out: bool  # the call hit its wall or CPU limit and was killed
    budget_exhausted: bool = False  # the session budget ran out during this call
    kernel_restarted: bool = False  # the python kernel was killed (its state lost; it restarts)
    message: str = ""  # why it was cut short, in words ("" when it ran to the end)
    oom_killed: bool = False  # the kernel OOM-killed a process of this call (memory_mb reached)

    @property
    def ok(self) -> bool:
        """Exit 0, within its limits, and no process of it killed for memory."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    def render(self) -> str:
        """A compact text for a tool observation (what a model would be shown)."""
        parts = []
        if self.stdout_cut:
            parts.append(f"[{self.stdout_cut} bytes of stdout cut]\n")
        parts.append(self.stdout)
        if self.stderr:
            if self.stderr_cut:
                parts.append(f"\n[{self.stderr_cut} bytes of stderr cut]")
            parts.append(("\n" if self.stdout else "") + self.stderr)
        if self.message:
            parts.append(f"\n[{self.message}]")
        elif self.exit_code not in (0, None):
            parts.append(f"\n[exit code {self.exit_code}]")
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class SessionUsage:
    cpu_s: float  # spent so far, all calls
    wall_s: float
    calls: int
    disk_bytes: int  # used in /workspace


@runtime_checkable
class Workspace(Protocol):
    """What `sandbox.session(...)` yields. Calls on one session are serialized."""

    backend: str
    limits: SessionLimits

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        cpu_s: float | None = None,
        fresh: bool = False,
    ) -> ExecResult:
        """Run `command` with bash in the session's shell state (cwd and exports persist).
        fresh=True: a clean shell in /workspace with the base environment, the saved state
        neither restored nor updated; graders use it, so that nothing the model exported
        (LD_PRELOAD, PATH, ...) reaches the commands they run."""
        ...

    async def python(
        self, code: str, *, timeout_s: float | None = None, cpu_s: float | None = None
    ) -> ExecResult:
        """Run `code` in the session's kernel; a trailing expression's repr is printed."""
        ...

    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        """Create or replace a file (relative paths are under /workspace); parents are made."""
        ...

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """A file's bytes (FileNotFoundError / IsADirectoryError / ValueError when too big)."""
        ...

    async def upload(self, local_dir: str | Path, dest: str = ".") -> int:
        """Copy a local directory tree (regular files and dirs) into the workspace; file count."""
        ...

    async def download(self, path: str, local_path: str | Path | None = None) -> bytes:
        """A file's bytes, also written to `local_path` when given."""
        ...

    async def usage(self) -> SessionUsage: ...

    async def kill_processes(self) -> None:
        """Kill every process of the session but the agent (the kernel restarts on next use)."""
        ...

    async def aclose(self) -> None: ...
