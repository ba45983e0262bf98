"""What a cell flooding the kernel's control pipe (fd 4) costs the session agent, per backend.

    python benchmarks/session_control_flood.py [docker bubblewrap] [--seconds 4]

Prints, per backend: the agent's own CPU during the call (host /proc), its peak-RSS growth, and
what the call reported (cpu_s, message). Run from the repository root with PYTHONPATH=$PWD.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sandbox"))

from test_sessions_limits import agent_host_pid, own_cpu, peak_rss_kb  # noqa: E402

from gspo_agents.tracking import BenchProgress  # noqa: E402
from sandbox import SessionLimits, SessionPool  # noqa: E402

FLOOD = (
    "import os, time\nline = b'{\"cell\": 0, \"pad\": \"' + b'x' * 60000 + b'\"}\\n'\n"
    "end = time.time() + {seconds}\nwhile time.time() < end:\n    os.write(4, line)\n"
)


async def measure(backend: str, seconds: float) -> None:
    pool = SessionPool(backend, max_sessions=1)
    await pool.start()
    try:
        async with pool.session(SessionLimits(exec_timeout_s=seconds + 60)) as ws:
            await ws.python("x = 1")
            agent = agent_host_pid(ws._handle.uid)
            cpu0, rss0 = own_cpu(agent), peak_rss_kb(agent)
            r = await ws.python(FLOOD.replace("{seconds}", str(seconds)))
            print(
                f"{backend}: agent cpu {own_cpu(agent) - cpu0:.2f}s, peak rss "
                f"{rss0 / 1024:.0f} -> {peak_rss_kb(agent) / 1024:.0f} MB; call wall "
                f"{r.wall_s:.2f}s cpu_s {r.cpu_s:.2f}s exit {r.exit_code} {r.message!r}"
            )
    finally:
        await pool.aclose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("backends", nargs="*", default=["docker", "bubblewrap"])
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    progress = BenchProgress("session_control_flood, backends", len(args.backends))
    for backend in args.backends:
        asyncio.run(measure(backend, args.seconds))
        progress.tick()


if __name__ == "__main__":
    main()
