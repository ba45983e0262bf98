"""Host side of the whole-tree limits: a pair of cgroups (compile, test) per sandbox slot.

The host (root) creates the groups once per slot, opens their control files and hands the open
file descriptors to the in-sandbox runner (inherited by bubblewrap and namespaces sandboxes, sent
over a unix socket into a docker container). The runner, unprivileged, writes each phase's
limits through them and moves each forked child into the group before exec; writes through a
file opened by root are allowed by the kernel (cgroup.procs checks the opener's credentials),
while the program gets none of the fds and cannot open the root-owned files itself. So the
kernel enforces memory (resident memory of the whole tree, OOM kill at the limit) and process
count, and the runner reads the tree's CPU time and peak memory. Groups are reused run after
run: limits are rewritten and peaks reset per test, nothing is created on the hot path.

cgroup v1 (memory, pids and cpuacct hierarchies, as on this project's CI machine) and v2 (one
unified hierarchy with memory and pids enabled) are both supported. Where neither is usable (not
root, no such controllers, a v2 hierarchy we may not delegate from) `detect()` says why and the
runner falls back to sampling /proc (runner_guard.Tree).

Cleanup: a closed slot's groups are removed at once (their processes killed first); a group that
does not drain within a second is retried at the next create and at interpreter exit, when every
group this process still has is removed. Groups of a process that died without exiting (SIGKILL)
are reaped when the next process finds the hierarchy (`reap_stale`: the owner's pid and start
time are in the name).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
TOP = "gspo-sandbox"  # every group we make lives under <hierarchy root>/gspo-sandbox/
V1_CONTROLLERS = ("memory", "pids", "cpuacct")
V2_CONTROLLERS = ("memory", "pids", "cpu")
PHASES = ("compile", "test")


@dataclass(frozen=True, slots=True)
class Hierarchy:
    version: int
    roots: dict[str, Path]  # v1: controller -> mount point; v2: {"unified": mount point}


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of every cgroup mount whose root is the hierarchy root."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3 or fields[3] != "/":
                continue
            if tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[4], tail[0], set(tail[2].split(","))))
    return found


def detect() -> tuple[Hierarchy | None, str]:
    """The hierarchy to make sandbox groups in, or (None, why not)."""
    if os.geteuid() != 0:
        return None, "cgroups need root to create the sandbox groups"
    mounts = _mounts()
    v1 = {c: Path(point) for point, kind, opts in mounts if kind == "cgroup" for c in opts}
    if all(c in v1 for c in V1_CONTROLLERS):
        return _usable(Hierarchy(1, {c: v1[c] for c in V1_CONTROLLERS}))
    if "memory" in v1:
        return None, "cgroup v1 without the pids or cpuacct controller"
    for point, kind, _ in mounts:
        if kind != "cgroup2":
            continue
        available = set((Path(point) / "cgroup.controllers").read_text().split())
        if {"memory", "pids"} <= available:
            return _usable(Hierarchy(2, {"unified": Path(point)}))
    return None, "no cgroup v1 memory/pids/cpuacct nor cgroup v2 memory/pids hierarchy mounted"


def _usable(h: Hierarchy) -> tuple[Hierarchy | None, str]:
    try:
        for root in h.roots.values():
            (root / TOP).mkdir(exist_ok=True)
        if h.version == 2:
            root = h.roots["unified"]
            wanted = " ".join(f"+{c}" for c in V2_CONTROLLERS)
            (root / "cgroup.subtree_control").write_text(wanted)
            (root / TOP / "cgroup.subtree_control").write_text(wanted)
    except OSError as exc:
        return None, f"cannot create sandbox cgroups under {list(h.roots.values())}: {exc}"
    reap_stale(h)
    return h, ""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_ticks(pid: int) -> str:
    """When process `pid` started (clock ticks since boot; "" when unknown). With the pid it
    names one process for good: pids are reused (pid_max is 32768 on many hosts, and a busy
    one goes round in minutes), so a pid alone may name a newer, unrelated process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces and parens
    return fields[19] if len(fields) > 19 else ""  # field 22, starttime


def owner_tag() -> str:
    """`pid.start` of this process: what its groups, containers and socket dirs are named by."""
    return f"{os.getpid()}.{start_ticks(os.getpid())}"


def owner_alive(tag: str) -> bool:
    """Whether the owner `pid` or `pid.start` (owner_tag) still runs: a pid in use by a process
    that started at another time is a dead owner's. When in doubt, alive."""
    pid, _, start = tag.partition(".")
    if not pid.isdigit():
        return True  # not a name we gave
    if not pid_alive(int(pid)):
        return False
    now = start_ticks(int(pid))
    return not (start and now) or start == now


def reap_stale(h: Hierarchy) -> None:
    """Remove groups whose owner (`pid.start.n.name` or, older, `pid.n.name`) no longer runs."""
    for root in h.roots.values():
        with contextlib.suppress(OSError):
            for entry in (root / TOP).iterdir():
                parts = entry.name.split(".")
                tagged = len(parts) > 3 and parts[1].isdigit() and parts[2].isdigit()
                owner = ".".join(parts[:2]) if tagged else parts[0]
                if entry.is_dir() and not owner_alive(owner):
                    _remove_dir(entry)


def _remove_dir(path: Path, attempts: int = 50) -> bool:
    """Kill whatever still runs in the group, then remove it (retrying while it drains)."""
    for attempt in range(attempts):
        with contextlib.suppress(OSError):
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if attempt + 1 < attempts:
                time.sleep(0.02)
    return False


# Groups whose removal failed (a tree still exiting on a loaded host): retried at the next
# create and at exit, so none outlives the process that made it.
_undrained: set[Path] = set()


def _remove_later(paths: list[Path]) -> None:
    for path in paths:
        if not _remove_dir(path):
            log.warning("sandbox: cgroup %s still has processes; removal retried later", path)
            _undrained.add(path)


def _retry_undrained() -> None:
    for path in list(_undrained):
        if _remove_dir(path, attempts=1):
            _undrained.discard(path)


def remove_own_groups() -> list[str]:
    """Remove every group this process made that still exists (at exit); what could not go."""
    left = []
    for point, _, _ in _mounts():
        for path in (Path(point) / TOP).glob(f"{os.getpid()}.*"):
            if path.is_dir() and not _remove_dir(path):
                left.append(str(path))
    _undrained.clear()
    return left


def _remove_own_at_exit() -> None:
    if os.geteuid() == 0:
        for path in remove_own_groups():
            log.warning("sandbox: cgroup %s could not be removed at exit", path)


atexit.register(_remove_own_at_exit)  # at import: runs after the backends' own exit hooks


_INSTANCES = itertools.count()


@dataclass
class SlotGroups:
    """The compile and test groups of one slot, with their control files open."""

    hierarchy: Hierarchy
    name: str
    dirs: list[Path] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # phase -> runner layout
    fds: list[int] = field(default_factory=list)

    @classmethod
    def create(cls, h: Hierarchy, name: str, phases: tuple[str, ...] = PHASES) -> SlotGroups:
        """The groups of `phases` (the runner's compile and test; a session's one group)."""
        # pid.start first (reap_stale reads the owner from it), then this process's instance
        # number: two Sandboxes of one backend in a process (a validator build beside a live
        # one) must not reach for the same groups.
        _retry_undrained()
        slot = cls(h, f"{owner_tag()}.{next(_INSTANCES)}.{name}")
        try:
            for phase in phases:
                slot.groups[phase] = slot._make(phase)
        except OSError:
            slot.close()
            raise
        return slot

    def _open(self, path: Path, flags: int) -> int:
        fd = os.open(path, flags | os.O_CLOEXEC)
        self.fds.append(fd)
        return fd

    def _optional(self, path: Path, flags: int) -> int | None:
        return self._open(path, flags) if path.exists() else None

    def _make(self, phase: str) -> dict[str, Any]:
        h, wr, rd, rw = self.hierarchy, os.O_WRONLY, os.O_RDONLY, os.O_RDWR
        if h.version == 1:
            d = {c: h.roots[c] / TOP / f"{self.name}.{phase}" for c in V1_CONTROLLERS}
            for path in d.values():
                path.mkdir()
                self.dirs.append(path)
            mem = d["memory"]
            oom_disabled = phase == "test"  # see runner_guard.GroupThread
            if oom_disabled:
                (mem / "memory.oom_control").write_text("1")
            return {
                "version": 1,
                "procs": [self._open(p / "cgroup.procs", wr) for p in d.values()],
                "tasks": [self._open(p / "tasks", wr) for p in d.values()],
                "oom_disabled": oom_disabled,
                "mem_max": self._open(mem / "memory.limit_in_bytes", wr),
                "swap_max": self._optional(mem / "memory.memsw.limit_in_bytes", wr),
                "mem_peak": self._open(mem / "memory.max_usage_in_bytes", rw),
                "mem_stat": self._open(mem / "memory.stat", rd),
                "mem_events": self._open(mem / "memory.oom_control", rd),
                "pids_max": self._open(d["pids"] / "pids.max", wr),
                "cpu": self._open(d["cpuacct"] / "cpuacct.usage", rd),
            }
        path = h.roots["unified"] / TOP / f"{self.name}.{phase}"
        path.mkdir()
        self.dirs.append(path)
        # A run's tree dies as a whole at its limit; a session loses one process (its kernel
        # and the rest of the call live on, as on v1).
        knobs = [("memory.swap.max", "0")]
        if phase in PHASES:
            knobs.append(("memory.oom.group", "1"))
        for knob, value in knobs:
            with contextlib.suppress(OSError):  # absent without swap accounting / old kernels
                (path / knob).write_text(value)
        return {
            "version": 2,
            "procs": [self._open(path / "cgroup.procs", wr)],
            "mem_max": self._open(path / "memory.max", wr),
            "swap_max": None,
            "mem_peak": self._optional(path / "memory.peak", rw),
            "mem_stat": self._open(path / "memory.stat", rd),
            "mem_events": self._open(path / "memory.events", rd),
            "pids_max": self._open(path / "pids.max", wr),
            "cpu": self._open(path / "cpu.stat", rd),
        }

    def set_limits(self, phase: str, memory_bytes: int, processes: int) -> None:
        """Write a group's memory (no swap) and process limits from the host."""
        group = self.groups[phase]
        os.pwrite(group["mem_max"], str(memory_bytes).encode(), 0)
        if group["swap_max"] is not None:  # v1: memory+swap, at least the memory limit
            os.pwrite(group["swap_max"], str(memory_bytes).encode(), 0)
        os.pwrite(group["pids_max"], str(processes).encode(), 0)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()
        dirs, self.dirs = self.dirs, []
        _remove_later(dirs)


def ctl_message(slot: SlotGroups) -> bytes:
    """What the docker runner receives with the fds: the layout in terms of our fd numbers."""
    import json

    return json.dumps({"host_fds": slot.fds, "groups": slot.groups}).encode()
