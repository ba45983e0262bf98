"""What the sandbox integrity tests share (test_sandbox_integrity.py, test_sandbox_confinement.py):
the one-slot sandbox fixture and the probe that the next run on a slot finds it clean."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sbtest_util import checked_sandbox

from sandbox import Limits, Program, Sandbox, TestCase, Verdict
from sandbox.isolation import cgroups


def py(source: str) -> Program:
    return Program("python", source)


def our_cgroups() -> list[str]:
    """Sandbox cgroups this test process made that still exist."""
    found = []
    for point, _, _ in cgroups._mounts():
        found += [str(p) for p in (Path(point) / cgroups.TOP).glob(f"{os.getpid()}.*")]
    return found


@pytest.fixture(name="slot")
async def slot_fixture(backend_name: str) -> AsyncIterator[Sandbox]:
    """A one-slot sandbox: consecutive runs share the slot (and, on docker, the container)."""
    # only this sandbox's groups: a session pool or a sandbox another test of this process keeps
    # open (until its event loop closes) holds groups under the same pid
    before = set(our_cgroups())
    async with checked_sandbox(backend_name, concurrency=1) as sb:
        yield sb
    assert sorted(set(our_cgroups()) - before) == []


CLEAN_PROBE = r"""
import ctypes, json, os
scratch = os.path.basename(os.path.dirname(os.getcwd()))
def listing(d):
    try:
        return sorted(n for n in os.listdir(d) if n != scratch)
    except FileNotFoundError:
        return []
def sysv(kind):
    try:
        return open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]
    except OSError:
        return []
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
mq = libc.mq_open(b"/gspo-leak", os.O_RDONLY)
with open("fill", "wb") as f:  # the scratch has room again
    f.write(b"x" * (64 << 20))
os.unlink("fill")
print(json.dumps({
    "tmp": listing("/tmp"), "shm": listing("/dev/shm"), "mqueue": listing("/dev/mqueue"),
    "sysv": [sysv(k) for k in ("shm", "msg", "sem")], "mq_open": mq,
    "processes": sorted(int(p) for p in os.listdir("/proc")
                        if p.isdigit() and int(p) not in (1, os.getpid())),
}))
"""


async def assert_next_run_clean(sb: Sandbox) -> None:
    """The next run on the slot finds no file, IPC object or process of the previous one."""
    result = await sb.run(py(CLEAN_PROBE), [TestCase("")], Limits(time_s=5))
    assert result.verdict is Verdict.OK, result
    report = json.loads(result.tests[0].stdout)
    assert report == {
        "tmp": [],
        "shm": [],
        "mqueue": [],
        "sysv": [[], [], []],
        "mq_open": -1,
        "processes": [],
    }, report
