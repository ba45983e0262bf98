"""Sandbox sessions on docker and bubblewrap (real engines): state persists within a session and
never crosses sessions; per-call limits and per-session budgets hold; files go in and out.

Every test ends with the `pool` fixture's leftover check: no process of the pool's uids and no
session container of ours survives `pool.aclose()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import pytest
from session_util import leftovers, pool, session_backend, started_pool  # noqa: F401

import sandbox
from sandbox import SandboxError, SessionBudgetExceeded, SessionLimits, SessionPool


async def test_state_persists_within_a_session(pool: SessionPool) -> None:  # noqa: F811
    async with pool.session() as ws:
        r = await ws.exec("export GREETING=hello; mkdir -p sub/dir && cd sub/dir; echo made > f")
        assert r.ok, r
        r = await ws.exec('echo "$GREETING $(pwd) $(cat f)"')
        assert r.stdout == "hello /workspace/sub/dir made\n", r
        r = await ws.exec("exit 7")
        assert r.exit_code == 7 and not r.timed_out
        r = await ws.exec("pwd; echo $GREETING")  # state survives a non-zero exit too
        assert r.stdout == "/workspace/sub/dir\nhello\n"
        assert (await ws.python("counter = 41\ndef bump():\n    return counter + 1")).ok
        r = await ws.python("bump()")
        assert r.stdout == "42\n" and r.exit_code == 0, r
        r = await ws.python("open('sub/dir/f').read()")  # the kernel sees the shell's files
        assert r.stdout == "'made\\n'\n"
        r = await ws.python("raise KeyError('boom')")
        assert r.exit_code == 1 and "KeyError: 'boom'" in r.stderr and "<cell>" in r.stderr
        assert (await ws.python("counter")).stdout == "41\n"  # an error loses nothing
        # a fresh shell (for graders) sees none of it, and leaves the saved state alone
        await ws.exec("export LD_PRELOAD=/workspace/evil.so PATH=/workspace/bin:$PATH")
        r = await ws.exec('echo "[$GREETING][$LD_PRELOAD][$PATH]"; pwd', fresh=True)
        assert r.stdout == "[][][/usr/local/bin:/usr/bin:/bin]\n/workspace\n", r
        r = await ws.exec('echo "$GREETING $LD_PRELOAD"; pwd')
        assert r.stdout == "hello /workspace/evil.so\n/workspace/sub/dir\n", r


async def test_state_never_leaks_across_sessions(session_backend: str) -> None:  # noqa: F811
    # warm=1: the second session may come from the warm pool; it must be just as clean
    p = await started_pool(session_backend, max_sessions=2, warm=1)
    try:
        async with p.session() as a:
            await a.exec("echo secret-a > /workspace/a.txt; echo secret-a > /tmp/a.txt")
            await a.exec("export SECRET_A=1; echo x > /dev/shm/a 2>/dev/null; true")
            await a.python("secret_a = 'kernel-a'")
            marker = (await a.exec("echo $$")).stdout
            assert marker
        async with p.session() as b, p.session() as c:
            r = await b.exec(
                "ls -A /workspace /tmp; cat /workspace/a.txt /tmp/a.txt; echo [$SECRET_A];"
                " ls /dev/shm 2>/dev/null"
            )
            assert "secret-a" not in r.stdout and "a.txt" not in r.stdout, r
            assert "[]" in r.stdout
            assert "NameError" in (await b.python("secret_a")).stderr
            # two live sessions see neither each other's files nor processes
            await b.exec("echo only-b > /workspace/b.txt; sleep 0.1")
            r = await c.exec("cat /workspace/b.txt; ls /proc | grep -c '^[0-9]'")
            assert "only-b" not in r.stdout and r.exit_code == 0
            assert int(r.stdout.split()[-1]) <= 4, r  # the agent, bash, ls, grep at most
    finally:
        await p.aclose()
    assert leftovers(p) == []


async def test_output_is_capped_keeping_the_tail(pool: SessionPool) -> None:  # noqa: F811
    limits = SessionLimits(output_bytes=1000)
    async with pool.session(limits) as ws:
        r = await ws.exec("seq 1 100000; echo oops >&2")
        full = "".join(f"{i}\n" for i in range(1, 100001))
        assert r.stdout == full[-1000:] and r.stdout_cut == len(full) - 1000, r.stdout_cut
        assert r.stderr == "oops\n" and r.stderr_cut == 0
        r = await ws.python("print('y' * 5000, end='')")
        assert r.stdout == "y" * 1000 and r.stdout_cut == 4000
        assert "[4000 bytes of stdout cut]" in r.render()


async def test_call_limits_kill_and_the_session_goes_on(pool: SessionPool) -> None:  # noqa: F811
    async with pool.session() as ws:
        r = await ws.exec("sleep 30", timeout_s=1)
        assert r.timed_out and r.exit_code is None and 0.9 < r.wall_s < 10, r
        r = await ws.exec("python3 -c 'while True: pass'", timeout_s=60, cpu_s=0.5)
        assert r.timed_out and "CPU time limit" in r.message, r
        assert r.cpu_s >= 0.5
        assert (await ws.python("kept = 1")).ok
        r = await ws.python("while True:\n    pass", timeout_s=60, cpu_s=0.5)
        assert r.timed_out and r.kernel_restarted and "restarted" in r.message, r
        r = await ws.python("kept")  # the kernel restarted: the variable is gone, it says so
        assert r.exit_code == 1 and "NameError" in r.stderr
        r = await ws.python("import os; os._exit(3)")
        assert r.kernel_restarted and not r.ok, r
        assert (await ws.python("1 + 1")).stdout == "2\n"
        assert (await ws.exec("echo alive")).stdout == "alive\n"


async def test_background_processes_are_killed_and_their_cpu_counted(
    pool: SessionPool,  # noqa: F811
) -> None:
    burn = "import time\nwhile time.process_time() < 0.4: pass\nopen('/tmp/burned', 'w')"
    async with pool.session() as ws:
        await ws.write_file("burn.py", burn)
        # a grandchild nobody waits for (the subshell exits at once) burns 0.4 s of CPU
        r = await ws.exec(
            "(python3 burn.py &); until [ -e /tmp/burned ]; do sleep 0.02; done; "
            "(sleep 1000 &); echo started",
            timeout_s=60,
        )
        assert r.ok and r.cpu_s >= 0.4, r
        r = await ws.exec("ps -eo comm= 2>/dev/null || ls /proc")
        assert "sleep" not in r.stdout, r  # nothing outlives the call that started it
        # a child the kernel has not reaped yet (a zombie) is the kernel's: the call still ends
        cell = "import subprocess, time\np = subprocess.Popen(['true'])\ntime.sleep(0.3)"
        r = await ws.python(cell, timeout_s=30)
        assert r.ok and not r.timed_out, r
        assert (await ws.python("p.poll()")).stdout == "0\n"


async def test_session_cpu_budget(pool: SessionPool) -> None:  # noqa: F811
    async with pool.session(SessionLimits(cpu_s=1.0)) as ws:
        r = await ws.exec("python3 -c 'while True: pass'", timeout_s=60)
        assert r.timed_out and r.budget_exhausted and "budget" in r.message, r
        with pytest.raises(SessionBudgetExceeded):
            await ws.exec("echo more")
        usage = await ws.usage()
        assert 1.0 <= usage.cpu_s < 3.0, usage


async def test_session_wall_budget(pool: SessionPool) -> None:  # noqa: F811
    async with pool.session(SessionLimits(wall_s=2.0)) as ws:
        assert (await ws.exec("sleep 0.5")).ok
        r = await ws.python("import time; time.sleep(30)", timeout_s=20)
        assert r.timed_out and r.budget_exhausted and r.wall_s < 5, r
        with pytest.raises(SessionBudgetExceeded):
            await ws.python("1")


async def test_disk_quota_memory_and_process_caps(pool: SessionPool) -> None:  # noqa: F811
    limits = SessionLimits(disk_mb=8, memory_mb=256, processes=16)
    async with pool.session(limits) as ws:
        r = await ws.exec("head -c 20000000 /dev/zero > big; echo rc=$?; du -k big")
        assert "rc=0" not in r.stdout, r
        assert "No space left" in r.stderr or "File too large" in r.stderr, r
        assert (await ws.usage()).disk_bytes <= 8 << 20
        await ws.exec("rm -f big")
        with pytest.raises(OSError):
            await ws.write_file("big2", b"x" * (9 << 20))
        r = await ws.python("x = bytearray(600 * 1024 * 1024)")
        assert r.exit_code == 1 and "MemoryError" in r.stderr, r
        bomb = (
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
        )
        r = await ws.python(bomb, timeout_s=3)
        assert r.timed_out, r
        r = await ws.exec("for i in $(seq 40); do sleep 5 & done; wait", timeout_s=3)
        assert "fork" in r.stderr.lower() or "resource" in r.stderr.lower(), r
        assert (await ws.exec("echo still here")).stdout == "still here\n"
    async with pool.session(SessionLimits(processes=16)) as ws:  # memory for 16 stacks
        # threads the kernel keeps running hold the cap until the kernel goes
        hog = (
            "import threading, time\nts = []\ntry:\n    for _ in range(64):\n"
            "        t = threading.Thread(target=time.sleep, args=(600,), daemon=True)\n"
            "        t.start()\n        ts.append(t)\nexcept RuntimeError:\n    pass\nlen(ts)"
        )
        r = await ws.python(hog)
        assert r.ok and int(r.stdout) < 16, r
        r = await ws.exec("/bin/true && echo forked", timeout_s=5)
        assert "forked" not in r.stdout, r  # threads count against the process cap
        await ws.kill_processes()  # the kernel and its threads go; the cap is free again
        assert (await ws.exec("/bin/true && echo forked")).stdout == "forked\n"


async def test_files_in_and_out(pool: SessionPool, tmp_path: Path) -> None:  # noqa: F811
    repo = tmp_path / "repo"
    (repo / "pkg" / "deep").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("VALUE = 7\n")
    (repo / "pkg" / "deep" / "blob.bin").write_bytes(bytes(range(256)) * 10)
    (repo / "README").write_text("hi\n")
    (repo / "link").symlink_to("/etc/passwd")  # never followed or copied
    async with pool.session() as ws:
        assert await ws.upload(repo, "repo") == 3
        r = await ws.exec("cd repo && find . -type f | sort && test ! -e link && echo nolink")
        assert r.stdout.split() == [
            "./README",
            "./pkg/__init__.py",
            "./pkg/deep/blob.bin",
            "nolink",
        ]
        r = await ws.python("import sys; sys.path.insert(0, 'repo'); import pkg; pkg.VALUE")
        assert r.stdout == "7\n", r
        assert await ws.read_file("repo/pkg/deep/blob.bin") == bytes(range(256)) * 10
        await ws.write_file("/tmp/out.txt", "résumé\n")
        local = tmp_path / "out.txt"
        assert await ws.download("/tmp/out.txt", local) == "résumé\n".encode()
        assert local.read_text() == "résumé\n"
        with pytest.raises(FileNotFoundError):
            await ws.read_file("nope.txt")
        with pytest.raises(IsADirectoryError):
            await ws.read_file("repo")
        with pytest.raises(ValueError):
            await ws.read_file("repo/pkg/deep/blob.bin", max_bytes=10)
        with pytest.raises(OSError):
            await ws.write_file("/etc/evil", "x")  # the root is read-only
        # what the code in the session planted at a path never hangs or redirects the host
        await ws.exec("cd /workspace && mkfifo fifo && ln -s /workspace/repo/README link")
        with pytest.raises(ValueError, match="not a regular file"):
            await asyncio.wait_for(ws.read_file("fifo"), 20)
        await asyncio.wait_for(ws.write_file("fifo", "now a file"), 20)
        await ws.write_file("link", "replaced")
        r = await ws.exec("cat fifo; echo; test -L link || cat link; echo; cat repo/README")
        assert str(await _error(ws.read_file("nope.txt"))).count("Errno") == 1
        assert r.stdout == "now a file\nreplaced\nhi\n", r


async def _error(call: Awaitable[object]) -> BaseException:
    try:
        await call
    except Exception as exc:  # noqa: BLE001 - returned for inspection
        return exc
    raise AssertionError("expected an error")


async def test_live_sessions_are_capped_with_backpressure(session_backend: str) -> None:  # noqa: F811
    p = await started_pool(session_backend, max_sessions=2)
    peak = 0
    two_in = asyncio.Event()  # the first two hold their slots until both are in

    async def one(i: int) -> str:
        nonlocal peak
        async with p.session() as ws:
            peak = max(peak, p.live)
            if p.live == 2:
                two_in.set()
            await asyncio.wait_for(two_in.wait(), 120)
            return (await ws.exec(f"echo {i}")).stdout

    try:
        outs = await asyncio.gather(*(one(i) for i in range(5)))
        assert outs == [f"{i}\n" for i in range(5)] and peak == 2
        async with p.session(), p.session():
            with pytest.raises(SandboxError, match="max_sessions=2"):
                async with p.session(acquire_timeout_s=0.5):
                    pass
    finally:
        await p.aclose()
    assert leftovers(p) == []


async def test_shared_pool_of_sandbox_session(session_backend: str) -> None:  # noqa: F811
    probe = await started_pool(session_backend, max_sessions=1)  # fail/skip like the others
    await probe.aclose()
    async with sandbox.session(SessionLimits(disk_mb=16), backend=session_backend) as ws:
        r = await ws.exec("df -k /workspace | tail -1")
        assert r.stdout.split()[1] == str(16 * 1024), r  # the limits reached the sandbox
    pools = list(sandbox.sessions.pool._default_pools[asyncio.get_running_loop()].values())
    assert len(pools) == 1
    await sandbox.close_sessions()
    assert leftovers(pools[0]) == []


async def test_docker_sessions_take_a_list_of_hosts() -> None:
    sock = "unix:///var/run/docker.sock"  # the same engine twice: the -H path, round-robin
    p = await started_pool("docker", max_sessions=2, hosts=[sock, sock])
    try:
        async with p.session() as a, p.session() as b:
            assert a._handle.host == sock and b._handle.host == sock
            assert (await a.exec("echo a")).stdout == "a\n"
            assert (await b.exec("echo b")).stdout == "b\n"
    finally:
        await p.aclose()
    assert leftovers(p) == []


def test_bad_limits_and_options_name_the_problem() -> None:
    with pytest.raises(ValueError, match=r"SessionLimits.cpu_s=0 must be positive"):
        SessionLimits(cpu_s=0)
    with pytest.raises(ValueError, match=r"max_file_bytes.*over 32 MiB.*upload"):
        SessionLimits(max_file_bytes=64 << 20)
    with pytest.raises(ValueError, match=r"unknown session backend 'podman'.*docker"):
        SessionPool("podman")
    with pytest.raises(ValueError, match=r"max_sessions=0 must be >= 1"):
        SessionPool("docker", max_sessions=0)
