"""What every backend shares: the runner protocol driver and per-slot host uids.

A backend's only job is to start the in-sandbox runner (sandbox/isolation/runner.py) somewhere isolated and
hand back its pipes; `drive` speaks the protocol. Each concurrent run holds a *slot*, and each slot
has its own host uid, so per-uid kernel limits (RLIMIT_NPROC) of one run never count another's
processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import secrets
import tempfile
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.errors import BackendFailure
from sandbox.isolation import cgroups as cgroups_mod
from sandbox.isolation.runner_guard import POLL_S

log = logging.getLogger(__name__)

STREAM_LIMIT = 64 << 20  # one runner line carries up to a test's capped stdout, JSON-escaped
_ISOLATION = Path(__file__).resolve().parent.parent  # sandbox/isolation
# The runner runs as `python3 -S -c RUNNER_SOURCE` inside the sandbox, where this package is not
# installed: a short prelude registers the runner's helper modules from their source text, then
# runner.py follows (so it imports `sandbox.isolation.runner_guard` as it does on the host).
RUNNER_MODULES = ("runner_guard", "runner_proc")  # in import order
_PRELUDE = """import sys as _sys, types as _types
for _pkg in ("sandbox", "sandbox.isolation"):
    _sys.modules.setdefault(_pkg, _types.ModuleType(_pkg))
for _name, _text in {modules!r}.items():
    _module = _types.ModuleType(_name)
    _sys.modules[_name] = _module
    exec(compile(_text, _name, "exec"), _module.__dict__)
"""
RUNNER_SOURCE = (
    _PRELUDE.format(
        modules={
            f"sandbox.isolation.{m}": (_ISOLATION / f"{m}.py").read_text() for m in RUNNER_MODULES
        }
    )
    + (_ISOLATION / "runner.py").read_text()
)
SANDBOX_UID = 65534  # the uid programs see inside bubblewrap and namespaces sandboxes

Decide = Callable[[dict[str, Any]], bool]  # a test event -> keep going?


@dataclass(slots=True)
class RunnerOutput:
    compile_ok: bool = False
    compile_output: str = ""
    binary: str | None = None  # base64 of the compiled program, when asked (compile cache)
    tests: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False  # the runner reported "done"
    clean: bool = True  # the runner verified that the slot keeps nothing of this run
    leftovers: list[str] = field(default_factory=list)  # what it found when not clean
    stopped_early: bool = False
    diagnostics: str = ""  # stderr of the backend process, for SE messages


UID_BASE, UID_BLOCK, UID_BLOCKS = 200_000, 1_000, 3_000
_UID_BLOCKS_TAKEN: dict[int, int | None] = {}  # block -> its held lock fd (None: no registry)


def uid_registry() -> str:
    """The host-wide directory of uid-block lock files (one per block in use, flock-held by
    the process that has it for as long as it lives: the kernel drops the lock when it dies)."""
    return os.environ.get("GSPO_UID_REGISTRY") or os.path.join(
        tempfile.gettempdir(), "gspo-uid-blocks"
    )


def _lock_block(block: int) -> int | None:
    """An flock-held fd on `block`'s lock file, or -1 when another live process holds it;
    None when there is no usable registry (then blocks are unique within this process only)."""
    try:
        os.makedirs(uid_registry(), mode=0o1777, exist_ok=True)
        fd = os.open(os.path.join(uid_registry(), f"{block}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return -1
    return fd


def allocate_uids(count: int) -> list[int]:
    """Random high uids, unlikely to collide with real users, and never with another pool or
    backend of this process or of any live process on this host (per-uid limits such as
    RLIMIT_NPROC would be shared, and a reaper killing a dead owner's uid would hit the live
    one's sessions): each call takes its own blocks of 1000, each held by an flock in
    uid_registry() until this process exits."""
    blocks = max(1, -(-count // UID_BLOCK))
    for _ in range(10_000):
        first = secrets.randbelow(UID_BLOCKS - blocks + 1)
        wanted = range(first, first + blocks)
        if any(b in _UID_BLOCKS_TAKEN for b in wanted):
            continue
        fds: dict[int, int | None] = {}
        for block in wanted:
            fd = _lock_block(block)
            if fd == -1:
                break
            fds[block] = fd
        else:
            _UID_BLOCKS_TAKEN.update(fds)
            return [UID_BASE + first * UID_BLOCK + i for i in range(count)]
        for fd in fds.values():  # another process has one of them: give the rest back
            if fd is not None:
                os.close(fd)
    raise RuntimeError("no free uid block left for another sandbox pool on this host")


@contextlib.contextmanager
def reapable_uid(uid: int) -> Iterator[bool]:
    """Whether leftovers of `uid` may be killed: its block is ours, or no live process holds
    it (then it is held for the duration, so that nobody takes it mid-reap). False: a live
    process has the block now, so the uid's processes are its own."""
    block = (uid - UID_BASE) // UID_BLOCK
    if block in _UID_BLOCKS_TAKEN or not 0 <= block < UID_BLOCKS:
        yield True  # ours (or not a sandbox block at all: the marker's word, as before)
        return
    fd = _lock_block(block)
    try:
        yield fd != -1
    finally:
        if fd is not None and fd != -1:
            os.close(fd)


async def drive(
    proc: asyncio.subprocess.Process, request: dict[str, Any], decide: Decide
) -> RunnerOutput:
    """Send the request, collect events, answer next/stop when interactive; never raises on EOF."""
    out = RunnerOutput()
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        await proc.stdin.drain()
        while True:
            line = await proc.stdout.readline()
            if not line:
                return out
            event = json.loads(line)
            kind = event.get("event")
            if kind == "compile":
                out.compile_ok, out.compile_output = event["ok"], event["output"]
                out.binary = event.get("binary")
            elif kind == "test":
                out.tests.append(event)
                if request.get("interactive"):
                    keep = decide(event)
                    out.stopped_early = not keep
                    proc.stdin.write(b"next\n" if keep else b"stop\n")
                    await proc.stdin.drain()
            elif kind == "error":
                raise BackendFailure(event.get("message", "sandbox runner failed"))
            elif kind == "done":
                out.finished = True
                out.clean = bool(event.get("clean", True))
                out.leftovers = list(event.get("leftovers") or [])
                return out
    except (BrokenPipeError, ConnectionResetError):
        return out
    except (json.JSONDecodeError, KeyError, ValueError) as exc:
        raise BackendFailure(f"sandbox runner sent a malformed message: {exc}") from exc


async def stop_process(proc: asyncio.subprocess.Process) -> str:
    """Kill the backend process if still alive, drain and close its pipes, return stderr's tail."""
    if proc.stdin is not None:
        proc.stdin.close()
    if proc.returncode is None:  # let a finished runner exit on its own: its pid namespace
        with contextlib.suppress(asyncio.TimeoutError):  # is torn down before it is reaped
            await asyncio.wait_for(proc.wait(), timeout=2)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    err = b""
    with contextlib.suppress(Exception):
        _, err = await asyncio.wait_for(
            asyncio.gather(_drain(proc.stdout), _drain(proc.stderr)), timeout=5
        )
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait(), timeout=10)
    return err.decode("utf-8", "replace")[-2000:]


async def _drain(stream: asyncio.StreamReader | None) -> bytes:
    return await stream.read() if stream is not None else b""


class Backend(ABC):
    """One isolation mechanism. Concurrency is bounded by the caller (Sandbox) to `slots`."""

    name: str = ""
    kill_all: bool = True  # the runner is alone in its pid namespace and may kill(-1)
    # Margin for RLIMIT_NPROC: the runner and the sandbox's own helpers run as the same uid.
    nproc_margin: int = 4
    scratch_parent: str | None = None  # None: the runner's default temp dir (/tmp inside)
    # Writable dirs that outlive a run (a warm slot): emptied, with SysV IPC, after each run,
    # and the slot is replaced when the runner cannot verify it is clean.
    wipe_dirs: tuple[str, ...] = ()
    seccomp: bool = True  # programs and compilers run under runner_guard's syscall filter

    def __init__(self, slots: int, *, cgroups: bool = True) -> None:
        self.slots = slots
        self._free: asyncio.Queue[int] | None = None
        self.uids = allocate_uids(slots)
        self.use_cgroups = cgroups
        self.hierarchy: cgroups_mod.Hierarchy | None = None
        self.cgroup_note = "disabled (cgroups=False)"  # why the /proc fallback, if it is used

    def setup_cgroups(self) -> None:
        """Find the cgroup hierarchy (called from check()); log and fall back when none."""
        if not self.use_cgroups:
            return
        self.hierarchy, why = cgroups_mod.detect()
        self.cgroup_note = why or f"cgroup v{self.hierarchy.version}"  # type: ignore[union-attr]
        if self.hierarchy is None:
            log.warning(
                "sandbox %s: no cgroups (%s); limits on the whole process tree fall back to "
                "sampling /proc every %.0f ms",
                self.name, why, 1000 * POLL_S,
            )  # fmt: skip

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        if self._free is None:
            self._free = asyncio.Queue()
            for i in range(self.slots):
                self._free.put_nowait(i)
        index = await self._free.get()
        try:
            yield index
        finally:
            self._free.put_nowait(index)

    @abstractmethod
    async def execute(
        self, request: dict[str, Any], decide: Decide, timeout_s: float
    ) -> RunnerOutput:
        """Run the runner on `request`; raise BackendFailure when the sandbox itself fails."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release everything the backend holds (containers, temp dirs)."""


class ProcessBackend(Backend):
    """A backend whose sandbox is one host process per submission (bwrap, unshare, local).

    Each slot owns a pair of cgroups (sandbox/isolation/cgroups.py) whose control-file fds every sandbox
    process of the slot inherits; the request tells the runner their numbers.
    """

    _slot_groups: dict[int, cgroups_mod.SlotGroups] | None = None

    def _groups_for(self, index: int) -> cgroups_mod.SlotGroups | None:
        if self.hierarchy is None:
            return None
        if self._slot_groups is None:
            self._slot_groups = {}
        if index not in self._slot_groups:
            try:
                self._slot_groups[index] = cgroups_mod.SlotGroups.create(
                    self.hierarchy, f"{self.name}-{index}"
                )
            except OSError as exc:
                raise BackendFailure(
                    f"{self.name}: cannot create the slot's cgroups: {exc}"
                ) from exc
        return self._slot_groups[index]

    @abstractmethod
    def argv(self, slot: int) -> list[str]:
        """The host command that starts the runner inside a fresh sandbox."""

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

    async def execute(
        self, request: dict[str, Any], decide: Decide, timeout_s: float
    ) -> RunnerOutput:
        async with self.slot() as index:
            groups = self._groups_for(index)
            if groups is not None:
                request = {**request, "cgroup": groups.groups}
            proc = await asyncio.create_subprocess_exec(
                *self.argv(index),
                pass_fds=groups.fds if groups is not None else (),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=STREAM_LIMIT,
                env=self.env(),
                start_new_session=True,
            )
            try:
                out = await asyncio.wait_for(drive(proc, request, decide), timeout_s)
            except asyncio.TimeoutError as exc:
                raise BackendFailure(f"{self.name}: runner exceeded {timeout_s:.0f}s") from exc
            finally:
                diagnostics = await asyncio.shield(stop_process(proc))
            out.diagnostics = diagnostics
            return out

    async def aclose(self) -> None:
        for groups in (self._slot_groups or {}).values():
            groups.close()
        self._slot_groups = None
