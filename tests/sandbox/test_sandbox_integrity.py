"""Sandbox integrity (SANDBOX.md 12-14, issue 13): runs cannot reach each other, limits hold for
the whole process tree, threads work, on every isolating backend (the syscall filter, tmpfs caps,
loopback and identity: test_sandbox_confinement.py).

Every case runs on a one-slot sandbox and is followed by `assert_next_run_clean`: the next run
on the same slot (the same warm container for docker) must see nothing the case left behind.
"""

from __future__ import annotations

import json

from integrity_util import assert_next_run_clean, py, slot_fixture  # noqa: F401 - `slot`
from sbtest_util import make_sandbox

from sandbox import Limits, Program, Sandbox, TestCase, Verdict

# 1. state between runs ---------------------------------------------------------------------------
LOCKED_DIRS = r"""
import os
for top in ("/tmp", "/dev/shm", os.getcwd()):
    for mode in (0o555, 0o000, 0o111):
        d = os.path.join(top, f"locked-{mode:o}")
        os.makedirs(os.path.join(d, "sub"))
        open(os.path.join(d, "sub", "secret"), "w").write("SECRET")
        open(os.path.join(d, "secret"), "w").write("SECRET")
        os.chmod(os.path.join(d, "sub"), mode)
        os.chmod(d, mode)
    os.symlink("/etc/passwd", os.path.join(top, "link"))
os.mkdir("/tmp/deep")  # deeper than PATH_MAX: no path names its bottom
os.chdir("/tmp/deep")
for _ in range(40):
    os.mkdir("d" * 200)
    os.chdir("d" * 200)
open("secret", "w").write("SECRET")
os.chmod(".", 0o500)
print("left")
"""


async def test_files_in_locked_dirs_do_not_survive(slot: Sandbox) -> None:
    result = await slot.run(py(LOCKED_DIRS), [TestCase("")], Limits(time_s=5))
    assert result.verdict is Verdict.OK, result
    await assert_next_run_clean(slot)


FILL_SCRATCH = r"""
import os
for top in ("/tmp", "/dev/shm"):
    d = os.path.join(top, "full")
    os.mkdir(d)
    try:
        with open(os.path.join(d, "blob"), "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
    except OSError as e:
        print(top, "filled", e.errno)
    os.chmod(d, 0o555)
"""
HELLO_CPP = '#include <cstdio>\nint main(){ std::puts("hello"); }\n'


async def test_full_scratch_does_not_break_the_next_compile(slot: Sandbox) -> None:
    result = await slot.run(py(FILL_SCRATCH), [TestCase("")], Limits(time_s=10, wall_time_s=60))
    assert result.verdict is Verdict.OK, result
    assert result.tests[0].stdout.count("filled") == 2, result.tests[0].stdout
    after = await slot.run(Program("cpp", HELLO_CPP), [TestCase("", "hello")])
    assert after.verdict is Verdict.OK, after  # not CE "No space left on device"
    await assert_next_run_clean(slot)


IPC_LEAK = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
made = {
    "shm": libc.shmget(0x6A5, 1 << 20, IPC_CREAT | 0o666),
    "msg": libc.msgget(0x6A6, IPC_CREAT | 0o666),
    "sem": libc.semget(0x6A7, 4, IPC_CREAT | 0o666),
}
libc.mq_open.restype = ctypes.c_int
made["mq"] = libc.mq_open(b"/gspo-leak", os.O_CREAT | os.O_RDWR, 0o666, None)
with open("/dev/shm/gspo-leak", "w") as f:
    f.write("x")
print(json.dumps(made))
"""


async def test_ipc_objects_do_not_survive(slot: Sandbox) -> None:
    result = await slot.run(py(IPC_LEAK), [TestCase("")])
    assert result.verdict is Verdict.OK, result
    made = json.loads(result.tests[0].stdout)
    assert all(v >= 0 for v in made.values()), made  # each kind was really created
    await assert_next_run_clean(slot)


DAEMONS = r"""
import os, subprocess, time
for _ in range(3):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            subprocess.Popen(["sleep", "1000"], start_new_session=True)
            time.sleep(1000)
        os._exit(0)
print("spawned")
"""


async def test_background_processes_do_not_survive(slot: Sandbox) -> None:
    result = await slot.run(py(DAEMONS), [TestCase("")])
    assert result.verdict is Verdict.OK, result
    await assert_next_run_clean(slot)


# 2. whole-tree limits ----------------------------------------------------------------------------
CHILDREN_MEMORY = r"""
import os, time
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(100 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(5)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print("done")
"""


async def test_memory_of_all_children_counts(slot: Sandbox) -> None:
    limits = Limits(memory_mb=256, time_s=5, wall_time_s=30)
    result = await slot.run(py(CHILDREN_MEMORY), [TestCase("")], limits)
    assert result.verdict is Verdict.MLE, result
    assert result.tests[0].memory_mb >= 200, result  # the tree's peak, not one process's
    await assert_next_run_clean(slot)


UNWAITED_CPU = r"""
import os, time
for _ in range(2):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                pass
        os._exit(0)
time.sleep(30)
"""


async def test_cpu_of_children_never_waited_for_counts(slot: Sandbox) -> None:
    limits = Limits(time_s=1, wall_time_s=40)  # the tree must hit 1 s CPU long before 40 s wall
    result = await slot.run(py(UNWAITED_CPU), [TestCase("")], limits)
    assert result.verdict is Verdict.TLE, result
    assert "CPU" in result.tests[0].message, result
    assert result.tests[0].time_s >= 1.0, result
    await assert_next_run_clean(slot)


SETSID_STORM = r"""
import os
while True:
    try:
        if os.fork() == 0:
            os.setsid()  # out of the test's process group and session
    except OSError:
        pass
"""


async def test_cpu_limit_holds_under_a_fork_and_setsid_storm(slot: Sandbox) -> None:
    """Issue 32 T7: 64 processes forking and leaving the session overshot a 2 s limit by 22-25%
    (2.44 s bubblewrap, 2.50 s namespaces): the runner polled every 20 ms at the storm's
    priority and its kill missed what called setsid(). The bound is 10% of a 2 s limit, the
    issue's own case, which the old runner missed on every backend: at 1 s the remaining fixed
    delay (one scheduling latency of the supervisor while the storm holds both cores, ~2 ms of
    CPU per ms late) took CI's loaded docker run to 1.101 s, a hair over 10% of that shorter
    limit; the old runner's 2.44-2.50 s at 2 s stays far outside the bound."""
    limit = 2.0
    # 64 forked interpreters copy pages as they run: beside a CPU burner, bubblewrap's tree once
    # passed the default 256 MB before 2 s of CPU (MLE, a correct verdict). Memory is not what
    # this test measures, so it gets room; the CPU bound stays as it was.
    result = await slot.run(
        py(SETSID_STORM),
        [TestCase("")],
        Limits(time_s=limit, wall_time_s=120, processes=64, memory_mb=1024),
    )
    assert result.verdict is Verdict.TLE and "CPU" in result.tests[0].message, result
    assert limit <= result.tests[0].time_s <= 1.1 * limit, result
    await assert_next_run_clean(slot)


PROCESS_COUNT = r"""
import os, time
started = 0
for _ in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    started += 1
print(started)
"""


async def test_process_count_covers_the_tree(slot: Sandbox) -> None:
    result = await slot.run(py(PROCESS_COUNT), [TestCase("")], Limits(processes=10, time_s=5))
    assert result.verdict is Verdict.OK, result
    assert int(result.tests[0].stdout) < 10, result.tests[0].stdout
    await assert_next_run_clean(slot)


# 3. threads and reserved memory ------------------------------------------------------------------
PY_THREADS = r"""
import threading
barrier = threading.Barrier(65)
threads = [threading.Thread(target=barrier.wait) for _ in range(64)]
for t in threads:
    t.start()
barrier.wait()
for t in threads:
    t.join()
print(len(threads))
"""
CPP_THREADS = r"""
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>
int main() {
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 64; ++i)
        threads.emplace_back([&] { ready++; while (ready.load() < 64) std::this_thread::yield(); });
    for (auto& t : threads) t.join();
    std::printf("%d\n", ready.load());
}
"""


async def test_64_threads_work_under_default_limits(slot: Sandbox) -> None:
    result = await slot.run(py(PY_THREADS), [TestCase("", "64")])
    assert result.verdict is Verdict.OK, result
    result = await slot.run(Program("cpp", CPP_THREADS), [TestCase("", "64")], Limits(time_s=5))
    assert result.verdict is Verdict.OK, result
    await assert_next_run_clean(slot)


RESERVE_CPP = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
int main() {
    char* big = static_cast<char*>(std::malloc(size_t(2) << 30));  // reserved, never touched
    char* used = static_cast<char*>(std::malloc(32 << 20));
    std::memset(used, 1, 32 << 20);
    std::printf("%d\n", big != nullptr && used[12345] == 1);
}
"""
RESERVE_PY = "import mmap\nm = mmap.mmap(-1, 1 << 30)\nm[0] = 1\nprint(len(m) >> 30)\n"


async def test_memory_limit_is_resident_not_reserved(slot: Sandbox) -> None:
    limits = Limits(memory_mb=128, time_s=5)
    result = await slot.run(Program("cpp", RESERVE_CPP), [TestCase("", "1")], limits)
    assert result.verdict is Verdict.OK, result
    result = await slot.run(py(RESERVE_PY), [TestCase("", "1")], limits)
    assert result.verdict is Verdict.OK, result
    await assert_next_run_clean(slot)


# the documented fallback without cgroups ----------------------------------------------------------
async def test_fallback_without_cgroups_still_limits_the_tree(backend_name: str) -> None:
    async with make_sandbox(backend_name, concurrency=1, cgroups=False) as sb:
        assert sb._backend.hierarchy is None
        memory = Limits(memory_mb=256, time_s=5, wall_time_s=30)
        result = await sb.run(py(CHILDREN_MEMORY), [TestCase("")], memory)
        assert result.verdict is Verdict.MLE, result
        result = await sb.run(py(UNWAITED_CPU), [TestCase("")], Limits(time_s=1, wall_time_s=40))
        assert result.verdict is Verdict.TLE and result.tests[0].time_s >= 1.0, result
        result = await sb.run(py(PY_THREADS), [TestCase("", "64")])
        assert result.verdict is Verdict.OK, result
        await assert_next_run_clean(sb)
