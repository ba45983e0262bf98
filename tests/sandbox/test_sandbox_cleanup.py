"""Nothing of a sandbox outlives it in a long-lived process (a trainer, this pytest process):
its per-slot cgroups, its containers, the fd-socket dirs of container starts (real docker and
bubblewrap, cgroup v1 or v2 as the host has them).

- a docker run cancelled while its container starts leaves no container, cgroups or uid held
  (before: the container and its cgroups stayed until close, and the slot's uid stayed taken,
  so the next run of a one-slot sandbox died on StopIteration);
- a process that never closes its sandboxes leaves no cgroups once it exits normally (before:
  bubblewrap's slot groups stayed until some later process reaped them);
- the fd-socket dirs of an owner that died mid-start are removed by the next start;
- a dead owner's cgroups and containers are reaped even when its pid is in use again.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from sbtest_util import checked_sandbox, labelled_containers, make_sandbox
from timing import patience

from sandbox import Program, TestCase, Verdict
from sandbox.isolation import cgroups, image
from sandbox.isolation.backends.docker import CTL_PREFIX

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PRINT_1 = Program("python", "print(1)")


def cgroups_of(pid: int) -> set[str]:
    """The sandbox cgroups process `pid` made that still exist (names start with its pid)."""
    found: set[str] = set()
    for point, _, _ in cgroups._mounts():
        found |= {str(p) for p in (Path(point) / cgroups.TOP).glob(f"{pid}.*")}
    return found


async def test_a_docker_run_cancelled_while_its_container_starts_leaves_nothing() -> None:
    before = cgroups_of(os.getpid())
    async with checked_sandbox("docker", concurrency=1) as sb:
        backend = sb._backend
        for _ in range(2):  # twice: the one slot's uid must be free again after each cancel
            task = asyncio.create_task(sb.run(PRINT_1, [TestCase("")]))
            deadline = time.monotonic() + patience(60)
            while not backend._live:  # type: ignore[attr-defined]
                # the container exists from here on; its runner waits for its cgroup fds
                assert not task.done(), task
                assert time.monotonic() < deadline, "the container never started"
                await asyncio.sleep(0.002)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert backend._live == {}  # type: ignore[attr-defined]
            assert backend._uids_in_use == set()  # type: ignore[attr-defined]
            assert cgroups_of(os.getpid()) - before == set()
            assert labelled_containers(backend.owner) == []  # type: ignore[attr-defined]
        result = await sb.run(PRINT_1, [TestCase("")])
        assert result.verdict is Verdict.OK, result


UNCLOSED = textwrap.dedent(
    """
    import asyncio, glob, os, sys
    from sandbox import Program, SessionPool, Sandbox, TestCase

    async def main():
        for name in sys.argv[1:]:  # used, never closed
            sb = Sandbox.create(name, max_concurrency=2)
            result = await sb.run(Program("python", "print(1)"), [TestCase("")])
            assert result.verdict.value == "OK", result
            pool = SessionPool(name, max_sessions=1, warm=1)
            async with pool.session() as ws:
                assert (await ws.exec("true")).ok

    asyncio.run(main())
    mine = f"gspo-sandbox/{os.getpid()}.*"  # v1 (one hierarchy per controller), v2
    print(len(glob.glob(f"/sys/fs/cgroup/*/{mine}") + glob.glob(f"/sys/fs/cgroup/{mine}")))
    """
)


async def test_sandboxes_never_closed_leave_no_cgroups_after_a_normal_exit() -> None:
    for name in ("docker", "bubblewrap"):
        make_sandbox(name)  # fail (CI) / skip here, with the reason, when it cannot run
    hierarchy, why = cgroups.detect()
    if hierarchy is None:
        pytest.skip(f"no sandbox cgroups on this host (the /proc fallback makes none): {why}")
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    owner = subprocess.Popen(
        [sys.executable, "-c", UNCLOSED, "docker", "bubblewrap"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    out, _ = await asyncio.to_thread(owner.communicate, timeout=patience(300))
    assert owner.returncode == 0 and int(out) > 0, out  # it held groups until its last line
    # checked at once: another process's next start would reap them (dead owner) soon after
    assert cgroups_of(owner.pid) == set()
    assert labelled_containers(f"{os.uname().nodename}:{owner.pid}") == []


def test_fd_socket_dirs_of_a_dead_owner_are_removed_at_the_next_start() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is now a dead owner
    tmp = tempfile.gettempdir()
    stale = {  # by pid (older names), and by a pid now in use by another process (this one)
        tempfile.mkdtemp(prefix=f"{CTL_PREFIX}{dead.pid}-", dir=tmp),
        tempfile.mkdtemp(prefix=f"{CTL_PREFIX}{os.getpid()}.1-", dir=tmp),
    }
    live = {  # this process's, by pid and by pid.start
        tempfile.mkdtemp(prefix=f"{CTL_PREFIX}{os.getpid()}-", dir=tmp),
        tempfile.mkdtemp(prefix=f"{CTL_PREFIX}{cgroups.owner_tag()}-", dir=tmp),
    }
    try:
        make_sandbox("docker")  # the start reaps what dead owners left
        assert [p for p in stale if os.path.exists(p)] == []
        assert all(os.path.isdir(p) for p in live)
    finally:
        for path in stale | live:
            subprocess.run(["rm", "-rf", path], check=True)


async def test_a_reused_pid_does_not_keep_a_dead_owners_cgroups_and_containers() -> None:
    """pids are reused (pid_max is 32768 here and goes round in minutes under load): what a
    dead owner left is reaped even when its pid now names a live process (this one)."""
    make_sandbox("bubblewrap")  # fail (CI) / skip here, with the reason, when it cannot run
    hierarchy, why = cgroups.detect()
    if hierarchy is None:
        pytest.skip(f"no sandbox cgroups on this host (the /proc fallback makes none): {why}")
    reused = f"{os.getpid()}.1"  # this pid, started at another time: a dead owner
    stale = [root / cgroups.TOP / f"{reused}.0.leak-test.test" for root in hierarchy.roots.values()]
    mine = [
        root / cgroups.TOP / f"{cgroups.owner_tag()}.0.leak-test.test"
        for root in hierarchy.roots.values()
    ]
    for path in stale + mine:
        path.mkdir()
    make_sandbox("docker")  # (builds the image when missing)
    owner = f"{os.uname().nodename}:{os.getpid()}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--label", f"gspo-sandbox.owner={owner}",
         "--label", "gspo-sandbox.owner-start=1", "--network", "none", image.image_tag(), "sleep", "600"],
        check=True, capture_output=True, timeout=patience(120),
    )  # fmt: skip
    try:
        assert labelled_containers(owner)
        make_sandbox("docker")  # the next start reaps
        assert [p for p in stale if p.exists()] == []
        assert all(p.is_dir() for p in mine)
        assert labelled_containers(owner) == []
    finally:
        for path in stale + mine:
            if path.exists():
                path.rmdir()
        for cid in labelled_containers(owner):
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
