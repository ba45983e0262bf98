"""Session limits hold for the whole process tree, on every session backend (real engines):

- threads a `python` cell leaves behind never run between calls, and every CPU second the
  kernel spends is in some call's `cpu_s` (so in `usage()` and the budget);
- memory is capped for all processes of the session together, and an OOM kill inside a call
  is reported in its `ExecResult` (`oom_killed`, `message`), never a silent exit 0;
- a call's CPU limit holds within 10% under a fork storm, measured independently on the host
  (the CPU the session agent reaped: every process of a call is its child when it dies);
- the agent's own work is bounded and counted: a cell flooding the kernel's control pipe (fd 4)
  ends its call with the limit named, the agent's memory stays flat, and every CPU second the
  agent spent on the call (measured on the host) is in the call's `cpu_s`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from session_util import _missing, pool, session_backend  # noqa: F401 - fixtures

from sandbox import SessionLimits, SessionPool

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def require_cgroups(pool: SessionPool) -> None:  # noqa: F811
    """These limits need the session cgroup (root on the host): fail under CI, else skip."""
    base = pool._backend.base  # type: ignore[union-attr]
    if base.hierarchy is None:
        _missing(pool.backend_name, f"no session cgroup here ({base.cgroup_note})")


def agent_host_pid(uid: int) -> int:
    """The host pid of a session's agent: its uid's process that is pid 1 of its namespace."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = dict(
                line.split(":", 1) for line in (entry / "status").read_text().splitlines()
            )
        except (OSError, ValueError):
            continue
        if int(status["Uid"].split()[0]) == uid and status["NSpid"].split()[-1] == "1":
            return int(entry.name)
    raise AssertionError(f"no session agent of uid {uid} on this host")


def reaped_cpu(pid: int) -> float:
    """CPU time of the reaped children of `pid` (cutime + cstime), from the host's /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / CLOCK_TICKS


def own_cpu(pid: int) -> float:
    """CPU time of process `pid` itself (utime + stime), from the host's /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


def kernel_cpu_cmd(pid: int) -> str:
    return f"awk '{{print ($14 + $15) / {CLOCK_TICKS}}}' /proc/{pid}/stat"


async def test_python_threads_never_run_between_calls(pool: SessionPool) -> None:  # noqa: F811
    # (no session cgroup needed: the kernel is stopped, and /proc counts it, on the fallback too)
    spin = (
        "import os, threading, time\nticks = [0]\n"
        "def spin():\n    while True:\n        ticks[0] += 1\n"
        "threading.Thread(target=spin, daemon=True).start()\ntime.sleep(0.3)\nos.getpid()"
    )
    async with pool.session() as ws:
        r = await ws.python(spin, timeout_s=60)
        assert r.ok, r
        kernel = int(r.stdout)
        await asyncio.sleep(1.5)  # the model thinks; a thread left running would burn CPU now
        # nothing of the kernel runs during an exec either (a grader's, say)
        r = await ws.exec(f"{kernel_cpu_cmd(kernel)}; sleep 1; {kernel_cpu_cmd(kernel)}")
        before, after = (float(x) for x in r.stdout.split())
        assert after - before < 0.05, r
        # every CPU second of the kernel (its thread included) is in some call's cpu_s
        usage = await ws.usage()
        assert usage.cpu_s >= before - 0.05, (usage, before)
        # a cell bigger than a pipe's buffer reaches the stopped kernel (it is resumed first)
        r = await ws.python("s = '" + "a" * 200_000 + "'\nlen(s)", timeout_s=60)
        assert r.stdout == "200000\n", r
        # the thread is stopped, not lost: it runs on during the next python call, counted there
        r = await ws.python("t0 = ticks[0]\ntime.sleep(1)\nticks[0] > t0", timeout_s=60)
        assert r.stdout == "True\n" and r.cpu_s > 0.05, r
        r = await ws.exec(kernel_cpu_cmd(kernel))
        usage = await ws.usage()
        assert usage.cpu_s >= float(r.stdout) - 0.05, (usage, r)
        # an exec that wakes the kernel up pays for what it then does, and it is stopped again
        r = await ws.exec(f"kill -CONT {kernel}; sleep 1", timeout_s=60)
        assert r.ok and r.cpu_s > 0.05, r
        r = await ws.exec(f"{kernel_cpu_cmd(kernel)}; sleep 1; {kernel_cpu_cmd(kernel)}")
        before, after = (float(x) for x in r.stdout.split())
        assert after - before < 0.05, r
        assert (await ws.usage()).cpu_s >= after - 0.05


CHILDREN = """
import os, time
# Six children of 180 MB each. No timing assumption (the machine may be loaded): each child
# says when its memory is resident, and the parent waits until every child is either ready or
# dead, then counts the live ones.
r, w = os.pipe()
pids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = b"\\x01" * (180 << 20)  # written, so resident
        os.write(w, b"%d\\n" % os.getpid())
        time.sleep(600)
        os._exit(0)
    pids.append(pid)
os.set_blocking(r, False)
ready, dead, buf = set(), set(), b""
while len(ready | dead) < len(pids):
    try:
        buf += os.read(r, 4096)
    except BlockingIOError:
        pass
    *lines, buf = buf.split(b"\\n")
    ready |= {int(x) for x in lines}
    dead |= {p for p in pids if p not in dead and os.waitpid(p, os.WNOHANG)[0] == p}
    time.sleep(0.05)
alive = [p for p in pids if p not in dead]
print("survivors", len(alive))
for p in alive:
    os.kill(p, 9)
    os.waitpid(p, 0)
"""


async def test_memory_is_capped_for_the_whole_tree_and_oom_is_reported(
    pool: SessionPool,  # noqa: F811
) -> None:
    require_cgroups(pool)
    limits = SessionLimits(memory_mb=256, disk_mb=16, tmp_mb=16)
    async with pool.session(limits) as ws:
        await ws.write_file("children.py", CHILDREN)
        r = await ws.exec("python3 children.py; echo exit=$?", timeout_s=120)
        survivors = int(r.stdout.split("survivors")[1].split()[0])
        # six children of 180 MB: at most one fits in 256 MB (+ the 32 MB of tmpfs room)
        assert survivors <= 1, r
        assert r.oom_killed and "out of memory" in r.message, r
        assert "out of memory" in r.render()
        # a python call whose child is OOM-killed says so too; the kernel (smaller) survives
        hog = "import time; b = b'\\x02' * (220 << 20); time.sleep(3)"
        cell = f"import subprocess\nkept = b'\\x01' * (60 << 20)\nsubprocess.run(['python3', '-c', {hog!r}]).returncode"
        r = await ws.python(cell, timeout_s=120)
        assert r.oom_killed and "out of memory" in r.message and not r.kernel_restarted, r
        assert r.stdout == "-9\n", r
        assert (await ws.python("len(kept) >> 20")).stdout == "60\n"
        assert (await ws.exec("echo fine")).stdout == "fine\n"
        r = await ws.exec("echo fine")
        assert r.ok and not r.oom_killed and r.message == "", r


STORM = """
import os, sys
while True:
    try:
        if os.fork() == 0 and sys.argv[1:] == ["evasive"]:
            os.setsid()  # out of the call's process group and session
    except OSError:
        pass
"""


async def test_cpu_limit_holds_under_a_fork_storm(pool: SessionPool) -> None:  # noqa: F811
    require_cgroups(pool)
    # The overshoot is a fixed delay (the agent's kill lands while the storm holds both cores:
    # ~0.2 s of CPU on a slow moment of this VM, 2.21 s at a 2 s limit once): at 3 s it stays
    # inside the same 10% bound, as the setsid storm of test_sandbox_integrity does at 2 s.
    limit = 3.0
    async with pool.session(SessionLimits(processes=64)) as ws:
        await ws.write_file("storm.py", STORM)
        agent = agent_host_pid(ws._handle.uid)  # type: ignore[attr-defined]
        for how in ("plain", "evasive"):
            before = reaped_cpu(agent)
            r = await ws.exec(f"python3 storm.py {how}", timeout_s=300, cpu_s=limit)
            spent = reaped_cpu(agent) - before  # measured on the host, not by the sandbox
            assert r.timed_out and "CPU time limit" in r.message, r
            assert spent <= 1.1 * limit, (how, spent, r)
            assert abs(r.cpu_s - spent) <= 0.1 * limit, (how, spent, r)
            assert (await ws.exec("echo after")).stdout == "after\n"
        assert (await ws.usage()).cpu_s >= 2 * limit


async def test_docker_without_session_cgroups_still_reports_oom() -> None:
    """Remote engines (any `hosts=`) give no cgroups of ours: the container's own caps bound the
    tree, and the agent reads the OOM kills of the container's memory cgroup instead."""
    from session_util import leftovers, started_pool

    sock = "unix:///var/run/docker.sock"
    p = await started_pool("docker", max_sessions=1, hosts=[sock])
    try:
        assert p._backend.base.hierarchy is None  # type: ignore[union-attr]
        async with p.session(SessionLimits(memory_mb=256, disk_mb=16, tmp_mb=16)) as ws:
            await ws.write_file("children.py", CHILDREN)
            r = await ws.exec("python3 children.py", timeout_s=120)
            assert int(r.stdout.split()[-1]) <= 1 and r.exit_code == 0, r
            assert r.oom_killed and "out of memory" in r.message and not r.ok, r
    finally:
        await p.aclose()
    assert leftovers(p) == []


# Nonstop writes to the kernel's "cell done" pipe: long JSON-looking lines (each one the old agent
# parsed again with every 64 KiB that came after it) for a few seconds.
FLOOD_CONTROL_PIPE = (
    "import os, time\nline = b'{\"cell\": 0, \"pad\": \"' + b'x' * 60000 + b'\"}\\n'\n"
    "end = time.time() + 4\nwhile time.time() < end:\n    os.write(4, line)\n"
)


async def test_a_flooded_control_pipe_is_the_cells_error_and_costs_the_agent_nothing_uncounted(
    pool: SessionPool,  # noqa: F811
) -> None:
    async with pool.session(SessionLimits(exec_timeout_s=60)) as ws:
        assert (await ws.python("kept = 1")).exit_code == 0
        agent = agent_host_pid(ws._handle.uid)
        cpu0, rss0 = own_cpu(agent), peak_rss_kb(agent)
        r = await ws.python(FLOOD_CONTROL_PIPE)
        spent, grown_kb = own_cpu(agent) - cpu0, peak_rss_kb(agent) - rss0
        assert r.exit_code is None and "control pipe" in r.message, r
        assert r.kernel_restarted and not r.timed_out, r
        assert spent <= r.cpu_s + 0.05, (spent, r.cpu_s)  # the agent's CPU is the call's
        assert grown_kb < 8 << 10, grown_kb  # what it read was not kept
        r = await ws.python("print('after')")
        assert r.exit_code == 0 and r.stdout == "after\n", r
