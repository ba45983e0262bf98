"""Sessions are cleaned up on every exit path, on docker and bubblewrap (real engines):
normal exit, an error in the body, cancellation mid-call, pool shutdown with live sessions,
a broken agent, and a trainer killed with SIGKILL (a real subprocess; the next start reaps)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sbtest_util import processes_of_uids
from session_util import (  # noqa: F401 - fixtures
    leftovers,
    pool,
    session_backend,
    session_cgroups,
    session_containers,
)
from timing import patience

from sandbox import BackendFailure, SessionClosed, SessionPool

PROJECT_ROOT = Path(__file__).resolve().parents[2]


async def test_closed_on_normal_exit_and_on_error(pool: SessionPool) -> None:  # noqa: F811
    async with pool.session() as ws:
        assert (await ws.exec("echo ok")).ok
    assert ws.closed and leftovers(pool) == []
    with pytest.raises(SessionClosed):
        await ws.exec("echo again")
    with pytest.raises(RuntimeError, match="episode failed"):
        async with pool.session() as ws2:
            await ws2.exec("sleep 0.1")
            raise RuntimeError("episode failed")
    assert ws2.closed and pool.live == 0 and leftovers(pool) == []


async def test_closed_on_cancellation_mid_call(pool: SessionPool) -> None:  # noqa: F811
    started = asyncio.Event()

    async def episode() -> None:
        async with pool.session() as ws:
            started.set()
            await ws.exec("sleep 60", timeout_s=120)

    task = asyncio.create_task(episode())
    await started.wait()
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.live == 0 and leftovers(pool) == []


async def test_cancelled_while_its_sandbox_starts(pool: SessionPool) -> None:  # noqa: F811
    """Cancelled at its first step (the session's cgroup being made in a thread, which runs on)
    and later in the start: no cgroup, process or container of it stays behind."""
    for steps in (1, 1, 20):

        async def episode() -> None:
            async with pool.session() as ws:
                await ws.exec("true")

        task = asyncio.create_task(episode())
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.live == 0 and leftovers(pool) == []


async def test_pool_close_ends_live_sessions(pool: SessionPool) -> None:  # noqa: F811
    hold = asyncio.Event()
    running: list[int] = []

    async def episode() -> str:
        async with pool.session() as ws:
            await ws.exec("echo running")
            running.append(1)
            await hold.wait()
            try:
                await ws.exec("echo after shutdown")
            except (SessionClosed, BackendFailure) as exc:
                return type(exc).__name__
            return "still ran"

    tasks = [asyncio.create_task(episode()) for _ in range(2)]
    while len(running) < 2:
        await asyncio.sleep(0.05)
    await pool.aclose()  # trainer shutdown with episodes in flight
    assert leftovers(pool) == []
    hold.set()
    assert set(await asyncio.gather(*tasks)) <= {"SessionClosed", "BackendFailure"}


async def test_an_episode_waiting_for_a_slot_starts_nothing_after_close(
    session_backend: str,  # noqa: F811
) -> None:
    from session_util import started_pool

    p = await started_pool(session_backend, max_sessions=1)
    started = asyncio.Event()

    async def holder() -> None:
        async with p.session() as ws:
            await ws.exec("true")
            started.set()
            await asyncio.sleep(3600)

    async def waiter() -> None:
        async with p.session() as ws:  # waits: the one slot is taken
            await ws.exec("true")

    tasks = [asyncio.create_task(holder())]
    await started.wait()
    tasks.append(asyncio.create_task(waiter()))
    await asyncio.sleep(0.1)
    await p.aclose()  # shutdown: the holder is cancelled by the trainer, its slot frees
    tasks[0].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[1], SessionClosed), results  # before: a new sandbox ran it
    assert leftovers(p) == []


async def test_a_dead_agent_is_an_infrastructure_failure(pool: SessionPool) -> None:  # noqa: F811
    async with pool.session() as ws:
        await ws.exec("echo hi")
        ws._handle.proc.kill()  # the sandbox dies under us (daemon restart, OOM kill, ...)
        with pytest.raises(BackendFailure):
            await ws.exec("echo hi")
        with pytest.raises(SessionClosed):  # and the session says it is unusable
            await ws.exec("echo hi")
    assert leftovers(pool) == []


async def test_a_warm_sandbox_that_died_is_replaced(session_backend: str) -> None:  # noqa: F811
    from session_util import started_pool

    p = await started_pool(session_backend, max_sessions=2, warm=1)
    try:
        while not p._idle:
            await asyncio.sleep(0.05)
        p._idle[0].proc.kill()  # the warm sandbox dies while idle
        await p._idle[0].proc.wait()
        async with p.session() as ws:  # never handed out: a fresh one serves the session
            assert (await ws.exec("echo fresh")).stdout == "fresh\n"
        while not p._idle:  # and the warm pool is refilled
            await asyncio.sleep(0.05)
        assert all(h.proc.returncode is None for h in p._idle)
    finally:
        await p.aclose()
    assert leftovers(p) == []


TRAINER = textwrap.dedent(
    """
    import asyncio, faulthandler, signal, sys
    from sandbox import SessionPool
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it hangs, if it does
    # Ctrl-C reaches a trainer in a terminal's foreground, where SIGINT is never ignored. A test
    # run started in the background of a non-interactive shell (`nohup .ci/run &`) hands its
    # children SIGINT ignored, and asyncio.run then installs no handler: the trainer slept on
    # through the signal. Give this trainer the disposition a foreground one has.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    async def main():
        pool = SessionPool(sys.argv[1], max_sessions=4, warm=1)
        await pool.start()
        async with pool.session() as a, pool.session() as b:
            await a.exec("echo x > /workspace/f")
            uids = sorted(pool._uids)
            print("READY", pool._backend.name, " ".join(map(str, uids)), flush=True)
            await asyncio.gather(a.exec("sleep 600", timeout_s=900), b.python("import time; time.sleep(600)", timeout_s=900))

    asyncio.run(main())
    """
)


def _left(uids: set[int], owner: str, backend: str, wait_s: float = 30.0) -> list[str]:
    deadline = time.monotonic() + patience(wait_s)
    while True:
        left = processes_of_uids(uids) + session_cgroups(int(owner.rpartition(":")[2]))
        if backend == "docker":
            left += session_containers(owner)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.mark.timing
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
async def test_killed_trainer_leaves_nothing_after_the_next_start(
    session_backend: str,  # noqa: F811
    sig: signal.Signals,
) -> None:
    """SIGKILL: nothing runs on in the trainer; its sessions go (agents see their stdin close)
    or are reaped by the next start. SIGINT (Ctrl-C, trainer shutdown): the episodes are
    cancelled and their sessions closed, the warm sandbox removed at exit, before any restart."""
    from session_util import started_pool

    probe = await started_pool(session_backend, max_sessions=1)  # fail/skip like the others
    await probe.aclose()
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, session_backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert trainer.stdout is not None
        line = trainer.stdout.readline()
        assert line.startswith("READY"), (line, trainer.stderr.read() if trainer.stderr else "")
        uids = {int(u) for u in line.split()[2:]}
        owner = f"{os.uname().nodename}:{trainer.pid}"
        time.sleep(0.5)  # both calls are running inside their sandboxes
        assert processes_of_uids(uids), "the sessions should be running"
        if session_backend == "docker":
            assert len(session_containers(owner)) >= 2
    finally:
        trainer.send_signal(sig)
        try:
            trainer.wait(timeout=patience(60))  # a clean shutdown under load takes longer
        except subprocess.TimeoutExpired:
            trainer.send_signal(signal.SIGUSR1)  # every thread's stack, into its stderr
            time.sleep(1)
            trainer.kill()
            _, err = trainer.communicate()
            pytest.fail(f"the trainer did not exit {patience(60):.0f} s after {sig.name}:\n{err}")
        finally:
            trainer.kill()
            trainer.wait()
    if sig == signal.SIGINT:  # a clean shutdown leaves nothing, with no restart needed
        assert await asyncio.to_thread(_left, uids, owner, session_backend) == []
    # the next start (a new trainer) reaps whatever the dead one left behind
    after = await started_pool(session_backend, max_sessions=1)
    try:
        assert await asyncio.to_thread(_left, uids, owner, session_backend) == []
    finally:
        await after.aclose()


async def test_orphans_of_a_dead_owner_are_reaped_at_start(session_backend: str) -> None:  # noqa: F811
    """The reaper itself, for sandboxes whose agent did not exit on its own (the test above
    mostly sees agents leave when their stdin closes): a sandbox owned by a dead pid is gone
    after the next pool starts."""
    from session_util import started_pool

    from sandbox.isolation import image
    from sandbox.sessions.backends.bubblewrap import marker_dir

    probe = await started_pool(session_backend, max_sessions=1)  # fail/skip like the others
    await probe.aclose()
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is now a dead owner
    uid = 299_999_000 + os.getpid() % 1000
    if session_backend == "docker":
        owner = f"{os.uname().nodename}:{dead.pid}"
        subprocess.run(
            ["docker", "run", "-d", "--rm", "--label", f"gspo-sandbox.owner={owner}",
             # a start time no live process has: the dead pid may be reused meanwhile
             "--label", "gspo-sandbox.owner-start=1",
             "--label", "gspo-sandbox.kind=session", "--user", f"{uid}:{uid}",
             "--network", "none", image.image_tag(), "sleep", "600"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        assert session_containers(owner)
    else:
        subprocess.run(  # double fork: an orphan that is not our child (no zombie to reap)
            ["sh", "-c", f"setpriv --reuid={uid} --regid={uid} --clear-groups sleep 600 &"],
            check=True,
            start_new_session=True,
        )
        marker_dir().mkdir(mode=0o700, exist_ok=True)
        (marker_dir() / f"{dead.pid}.{uid}").touch()
        for _ in range(100):  # setpriv switches uid a moment after sh returns
            if processes_of_uids({uid}):
                break
            time.sleep(0.05)
        assert processes_of_uids({uid})
    after = await started_pool(session_backend, max_sessions=1)
    await after.aclose()
    if session_backend == "docker":
        # `docker rm -f` returns while another host process's reaper is removing it too
        deadline = time.monotonic() + patience(10)
        while session_containers(owner) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert session_containers(owner) == []
    else:
        assert not (marker_dir() / f"{dead.pid}.{uid}").exists()
    assert processes_of_uids({uid}) == []


HOLDER = textwrap.dedent(
    """
    import asyncio, secrets, sys, time
    from sandbox import SessionPool
    real, forced = secrets.randbelow, int(sys.argv[1])
    secrets.randbelow = lambda n: (setattr(secrets, "randbelow", real), forced)[1]
    async def main():
        pool = SessionPool("bubblewrap", max_sessions=1)
        async with pool.session() as ws:
            await ws.exec("true")
            print("READY", ws._handle.uid, flush=True)
            time.sleep(600)
    asyncio.run(main())
    """
)


async def test_a_dead_owners_uid_block_is_never_a_live_ones(monkeypatch) -> None:
    """Two processes draw the same uid block; one holds a live session, the other is SIGKILLed
    with one open; the next pool start reaps the dead one's session by its uid and must leave
    the live one's alone: uid blocks are unique across the host's processes (bubblewrap, the
    backend that reaps by uid)."""
    import secrets

    from session_util import started_pool

    probe = await started_pool("bubblewrap", max_sessions=1)  # fail/skip like the others
    await probe.aclose()
    block = secrets.randbelow(2_000)
    real = secrets.randbelow
    monkeypatch.setattr(
        secrets, "randbelow", lambda n: (setattr(secrets, "randbelow", real), block)[1]
    )
    live = SessionPool("bubblewrap", max_sessions=1)  # the block drawn first: ours
    monkeypatch.setattr(secrets, "randbelow", real)
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    try:
        async with live.session() as ws:
            assert (await ws.exec("echo up")).stdout == "up\n"
            other = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(block)],
                stdout=subprocess.PIPE, env=env, text=True,
            )  # fmt: skip
            try:
                assert other.stdout is not None
                line = await asyncio.to_thread(other.stdout.readline)
                assert line.startswith("READY"), line
            finally:
                other.kill()
                other.wait()
            after = await started_pool("bubblewrap", max_sessions=1)  # reaps the dead one's
            await after.aclose()
            r = await ws.exec("echo still here")
            assert r.stdout == "still here\n", r
            assert int(line.split()[1]) != ws._handle.uid
    finally:
        await live.aclose()
    assert leftovers(live) == []
