"""Sandbox sessions: start cost, call latency, and 64 sessions at once. One table.

    python benchmarks/sessions.py [--backends docker,bubblewrap] [--calls 50] [--starts 5]
                                  [--concurrent 64]

Rows, per session backend:
  start cold     `pool.session()` entered with no warm sandbox (container/namespace + agent up)
  start warm     the same with a warm sandbox ready (`warm=2`): one JSON round trip
  close          leaving the `async with` (the agent killed, the container removed)
  exec `true`    a trivial `ws.exec("true")` in a live session (bash with the shell state)
  python `1`     a trivial `ws.python("1")` in the live kernel
  ... /proc      the same two without the session's cgroup (`cgroups=False`: the /proc fallback),
                 to show what the whole-tree limits cost per call
and, per `--remote-backends` backend, the same two calls in a session of the `remote` backend
(two `python -m sandbox serve` services on loopback with that session backend, over HTTP with
the token checked); and the baselines: `docker exec` into a running container (`true`, `python3 -c pass`) and a bare
local subprocess (`/bin/true`, `python3 -c pass`), no isolation at all.
Then `--concurrent` sessions started at once (pool cap = that many): wall time until all answered
an exec, memory: the PSS of every host process they need (agents and their children, our
attached `docker run -i` clients, containerd shims) and the machine-wide MemAvailable drop
(noisy on a shared machine; it includes the kernel's per-container overhead), and
what is left after they close: processes of the sessions' uids, our session containers, marker
files. Latencies are p50 / p90 over `--calls` (or `--starts`) samples.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loopback_fleet import loopback_fleet

from gspo_agents.tracking import BenchProgress
from sandbox import Sandbox, SandboxError, SessionPool
from sandbox.isolation import image
from sandbox.sessions.backends.base import uid_processes
from sandbox.sessions.backends.bubblewrap import marker_dir

Row = tuple[str, str, str]  # (what, p50, p90 / note)


def ms(values: list[float]) -> tuple[str, str]:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return f"{1000 * statistics.median(values):.1f} ms", f"{1000 * p90:.1f} ms"


async def timed(fn: Callable[[], Awaitable[Any]], n: int, progress: BenchProgress) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
        progress.tick()
    return out


def pss_mb(pids: set[int]) -> float:
    """Proportional set size of these processes (shared pages split among their users)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except (OSError, ValueError):
            continue
    return total / 1024


def session_pids(pool: SessionPool) -> set[int]:
    """The sessions' processes (their uids), our attached clients and (docker) their shims."""
    pids = {p for u in pool._uids for p in uid_processes(u)}
    pids |= {h.proc.pid for h in pool._live.values()}
    if pool.backend_name == "docker":
        owner = pool._backend.owner  # type: ignore[union-attr]
        ids = subprocess.run(
            ["docker", "ps", "-q", "--no-trunc", "--filter", f"label=gspo-sandbox.owner={owner}"],
            capture_output=True, text=True, timeout=60,
        ).stdout.split()  # fmt: skip
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "containerd-shim" in cmd and any(i in cmd for i in ids):
                pids.add(int(entry.name))
    return pids


def mem_used_mb() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kb = int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])
    return kb / 1024


async def session_rows(backend: str, calls: int, starts: int, progress: BenchProgress) -> list[Row]:
    rows: list[Row] = []
    cold = SessionPool(backend, max_sessions=4, warm=0)
    await cold.start()
    try:
        enter, leave = [], []
        for _ in range(starts):
            t = time.perf_counter()
            async with cold.session() as ws:
                enter.append(time.perf_counter() - t)
                await ws.exec("true")
                t = time.perf_counter()
            leave.append(time.perf_counter() - t)
            progress.tick()
        rows.append((f"{backend}: start cold", *ms(enter)))
        rows.append((f"{backend}: close", *ms(leave)))
        async with cold.session() as ws:
            await ws.exec("true")
            await ws.python("1")  # the kernel starts on first use
            exec_s = await timed(lambda: ws.exec("true"), calls, progress)
            rows.append((f"{backend}: exec `true`", *ms(exec_s)))
            python_s = await timed(lambda: ws.python("1"), calls, progress)
            rows.append((f"{backend}: python `1`", *ms(python_s)))
    finally:
        await cold.aclose()
    rows += await fallback_rows(backend, calls, progress)
    warm = SessionPool(backend, max_sessions=4, warm=2)
    await warm.start()
    try:
        enter = []
        for _ in range(starts):
            while len(warm._idle) < warm.warm:  # let the pool refill between samples
                await asyncio.sleep(0.05)
            t = time.perf_counter()
            async with warm.session() as ws:
                enter.append(time.perf_counter() - t)
            progress.tick()
        rows.append((f"{backend}: start warm", *ms(enter)))
    finally:
        await warm.aclose()
    return rows


async def remote_rows(backend: str, calls: int, progress: BenchProgress) -> list[Row]:
    """exec/python latency in a remote session (a live one: the start is not timed)."""
    rows: list[Row] = []
    with loopback_fleet(2, backend=backend, max_concurrency=2, sessions=4) as (urls, token):
        sb = Sandbox.create("remote", urls=urls, token=token)  # type: ignore[arg-type]
        try:
            async with sb.session() as ws:  # type: ignore[attr-defined]
                await ws.exec("true")
                await ws.python("1")
                exec_s = await timed(lambda: ws.exec("true"), calls, progress)
                rows.append((f"remote ({backend}, 2 services): exec `true`", *ms(exec_s)))
                python_s = await timed(lambda: ws.python("1"), calls, progress)
                rows.append((f"remote ({backend}, 2 services): python `1`", *ms(python_s)))
        finally:
            await sb.aclose()
    return rows


async def fallback_rows(backend: str, calls: int, progress: BenchProgress) -> list[Row]:
    pool = SessionPool(backend, max_sessions=1, cgroups=False)
    await pool.start()
    try:
        async with pool.session() as ws:
            await ws.python("1")
            exec_s = await timed(lambda: ws.exec("true"), calls, progress)
            python_s = await timed(lambda: ws.python("1"), calls, progress)
    finally:
        await pool.aclose()
    return [
        (f"{backend}: exec `true`, /proc (no session cgroup)", *ms(exec_s)),
        (f"{backend}: python `1`, /proc (no session cgroup)", *ms(python_s)),
    ]


async def run(argv: list[str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await proc.wait()


async def baseline_rows(calls: int, progress: BenchProgress) -> list[Row]:
    rows: list[Row] = []
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    true_s = await timed(lambda: run(["/bin/true"]), calls, progress)
    rows.append(("local subprocess: /bin/true", *ms(true_s)))
    python_s = await timed(lambda: run([py, "-c", "pass"]), calls, progress)
    rows.append(("local subprocess: python3 -c pass", *ms(python_s)))
    docker = shutil.which("docker")
    if not docker:
        return rows + [("docker exec", "n/a", "no docker CLI")]
    name = f"gspo-bench-exec-{os.getpid()}"
    started = subprocess.run(
        [docker, "run", "-d", "--rm", "--name", name, "--network", "none", image.image_tag(),
         "sleep", "600"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if started.returncode != 0:
        return rows + [("docker exec", "n/a", started.stderr.strip()[:80])]
    try:
        exec_true = [docker, "exec", name, "true"]
        exec_py = [docker, "exec", name, "python3", "-c", "pass"]
        exec_true_s = await timed(lambda: run(exec_true), calls, progress)
        rows.append(("docker exec: true", *ms(exec_true_s)))
        exec_py_s = await timed(lambda: run(exec_py), calls, progress)
        rows.append(("docker exec: python3 -c pass", *ms(exec_py_s)))
    finally:
        subprocess.run([docker, "rm", "-f", name], capture_output=True, timeout=60)
    return rows


async def concurrent_rows(backend: str, n: int, progress: BenchProgress) -> list[Row]:
    base_mem = mem_used_mb()
    pool = SessionPool(backend, max_sessions=n, warm=0)
    await pool.start()
    peak_mem = 0.0
    ready = asyncio.Event()
    up: list[int] = []

    async def one(i: int) -> bool:
        async with pool.session() as ws:
            ok = (await ws.exec(f"echo {i}")).stdout == f"{i}\n"
            up.append(1)
            progress.tick()
            if len(up) == n:
                ready.set()
            await ready.wait()
            return ok

    t = time.perf_counter()
    task = asyncio.gather(*(one(i) for i in range(n)))
    await ready.wait()
    all_up = time.perf_counter() - t
    peak_mem = mem_used_mb() - base_mem
    pids = session_pids(pool)
    pss = pss_mb(pids)
    oks = await task
    closed = time.perf_counter() - t - all_up
    await pool.aclose()
    await asyncio.sleep(1.0)
    procs = sum(len(uid_processes(u)) for u in pool._uids)
    containers = 0
    if backend == "docker":
        owner = pool._backend.owner  # type: ignore[union-attr]
        out = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=gspo-sandbox.owner={owner}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        containers = len(out.stdout.split())
    markers = len(list(marker_dir().glob(f"{os.getpid()}.*"))) if marker_dir().exists() else 0
    return [
        (f"{backend}: {n} sessions up (start+exec)", f"{all_up:.1f} s", f"{sum(oks)}/{n} answered"),
        (f"{backend}: {n} sessions, PSS", f"{pss:.0f} MiB", f"{pss / n:.1f} MiB each, {len(pids)} host processes"),
        (f"{backend}: {n} sessions, machine-wide", f"{peak_mem:.0f} MiB", "MemAvailable drop (noisy: shared machine)"),
        (f"{backend}: {n} sessions closed", f"{closed:.1f} s", "all of them together"),
        (f"{backend}: left after close", f"{procs} procs", f"{containers} containers, {markers} markers"),
    ]  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="docker,bubblewrap")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=64)
    parser.add_argument("--remote-backends", default="docker", help="'' for none")
    args = parser.parse_args()
    backends, baseline_calls = args.backends.split(","), min(args.calls, 30)
    # in timed samples (a session started, a call answered), so the ETA spans every row; after
    # each part the count moves on to its plan (an unavailable backend takes no samples)
    per_backend = 2 * args.starts + 4 * args.calls
    remote = list(filter(None, args.remote_backends.split(",")))
    total = len(backends) * (per_backend + args.concurrent) + 4 * baseline_calls
    total += 2 * args.calls * len(remote)
    progress = BenchProgress("samples, all rows", total, min_interval_s=5.0)
    rows: list[Row] = []
    planned = 0
    for backend in backends:
        try:
            rows += await session_rows(backend, args.calls, args.starts, progress)
        except SandboxError as exc:
            rows.append((backend, "n/a", str(exc)[:100]))
        planned += per_backend
        progress.tick(planned)
    for backend in remote:
        try:
            rows += await remote_rows(backend, args.calls, progress)
        except SandboxError as exc:
            rows.append((f"remote ({backend})", "n/a", str(exc)[:100]))
        planned += 2 * args.calls
        progress.tick(planned)
    rows += await baseline_rows(baseline_calls, progress)
    planned += 4 * baseline_calls
    progress.tick(planned)
    if args.concurrent:
        for backend in backends:
            try:
                rows += await concurrent_rows(backend, args.concurrent, progress)
            except SandboxError as exc:
                rows.append((f"{backend}: concurrent", "n/a", str(exc)[:100]))
            planned += args.concurrent
            progress.tick(planned)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| what | p50 | p90 / note |\n|---|---|---|")
    for what, a, b in rows:
        print(f"| {what} | {a} | {b} |")


if __name__ == "__main__":
    asyncio.run(main())
