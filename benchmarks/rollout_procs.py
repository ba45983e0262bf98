"""Aggregate turns/s of 1, 2 and 4 driving processes against instant SGLang stand-ins.

Each driving process owns an event loop, a `RolloutManager`, its envs and an `SGLangEngine`
client, and drives its share of the episodes (as a learner rank drives groups g % world).
The engine is `gspo_agents.rollout.server` (the SGLang-compatible HTTP subset) over an engine
that answers at once, one stand-in worker process per driving process, so what is measured is
the driving: HTTP client, manager, chat formatting, env steps. A barrier starts the drivers
together; aggregate turns/s = all turns / (last finish - first start). On a shared machine the
load average is printed with each row: the ratio means something only when cores are free.

Run:  python benchmarks/rollout_procs.py [--procs 1 2 4] [--episodes 256] [--turns 4] [--quick]
Target (issue 33): two driving processes carry >= 1.7x one process's turns/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


class InstantStandIn:
    """The part of LocalEngine that the HTTP server calls: answers every request at once."""

    model_path = "instant"
    weight_version = 0
    paused = False
    busy = False
    context_length = 1_000_000
    max_batch_size = 1_000_000

    def __init__(self, answer_ids: list[int]) -> None:
        from types import SimpleNamespace

        self._answer = answer_ids
        self._logprobs = [-1.0] * len(answer_ids)
        self.stats = SimpleNamespace(requests=0, forward_steps=0, max_running=0)

    def request_ids(self) -> list[str]:
        return []

    async def generate(self, input_ids, sampling, request_id, **_):
        from gspo_agents.rollout.engine import Generation

        n = min(len(self._answer), sampling.max_new_tokens)
        return Generation(self._answer[:n], self._logprobs[:n], "stop", 0)

    async def health(self) -> bool:
        return True

    async def abort(self, request_id=None) -> None: ...


def answer_ids(tokenizer, tokens_per_turn: int) -> list[int]:
    from gspo_agents.rollout.chat import ChatFormat

    stop = ChatFormat(tokenizer).stop_token_ids[0]
    ids = tokenizer.encode(" Let me compute: print(12 * 34)", add_special_tokens=False)
    return (ids * tokens_per_turn)[: tokens_per_turn - 1] + [stop]


def tokenizer():
    from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model

    return load_tokenizer(resolve_model(ModelConfig(name="tiny")))


def serve(port: int, tokens_per_turn: int) -> None:
    """The stand-in worker (run as its own process): the HTTP server over InstantStandIn."""
    import uvicorn

    from gspo_agents.rollout.server import build_app

    tok = tokenizer()
    app = build_app(InstantStandIn(answer_ids(tok, tokens_per_turn)), None)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def stand_ins(n: int, tokens_per_turn: int):
    """URLs of n stand-in worker processes, stopped on exit."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs, urls = [], []
    try:
        for _ in range(n):
            port = _free_port()
            argv = [sys.executable, __file__, "--serve-port", str(port)]
            argv += ["--tokens-per-turn", str(tokens_per_turn)]
            procs.append(subprocess.Popen(argv, cwd=REPO, env=env))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls, strict=True):
            _wait_up(proc, url)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def _wait_up(proc: subprocess.Popen, url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"stand-in at {url} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"stand-in at {url} did not answer /health within {timeout_s:.0f} s")


async def drive(url: str, episodes: int, turns: int, tokens_per_turn: int, barrier) -> dict:
    from rollout_overhead import InstantEnv

    from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
    from gspo_agents.rollout.sglang_engine import SGLangEngine

    G = 8
    cfg = RolloutConfig(
        num_samples_per_task=G,
        max_new_tokens_per_turn=tokens_per_turn,
        max_context_tokens=100_000,
        max_live_trajectories=episodes,
    )
    engine = SGLangEngine([url])
    manager = RolloutManager(engine, lambda: InstantEnv(max_turns=turns), tokenizer(), cfg)
    tasks = [{"id": str(i), "turns": turns} for i in range(max(episodes // G, 1))]
    await manager.collect(tasks[:1])  # warm: connections, first template render
    await asyncio.to_thread(barrier.wait)
    started, cpu = time.time(), time.process_time()
    result = await manager.collect(tasks)
    finished, cpu = time.time(), time.process_time() - cpu
    await manager.aclose()
    await engine.close()
    done = int(result.metrics["rollout/turns"])
    assert result.metrics["rollout/complete"] == len(tasks) * G, result.metrics
    return {"turns": done, "started": started, "finished": finished, "cpu_s": cpu}


def driver(url, episodes, turns, tokens_per_turn, barrier, out) -> None:
    """One driving process (spawned): its own event loop, manager, envs and engine client."""
    out.put(asyncio.run(drive(url, episodes, turns, tokens_per_turn, barrier)))


def measure(procs: int, episodes: int, turns: int, tokens_per_turn: int) -> dict:
    """One row: `procs` drivers, each with `episodes` concurrent episodes and its own stand-in."""
    ctx = mp.get_context("spawn")
    with stand_ins(procs, tokens_per_turn) as urls:
        barrier, out = ctx.Barrier(procs), ctx.Queue()
        workers = [
            ctx.Process(target=driver, args=(u, episodes, turns, tokens_per_turn, barrier, out))
            for u in urls
        ]
        for w in workers:
            w.start()
        rows = [out.get(timeout=900) for _ in workers]
        for w in workers:
            w.join(timeout=60)
    wall = max(r["finished"] for r in rows) - min(r["started"] for r in rows)
    total = sum(r["turns"] for r in rows)
    cpu = sum(r["cpu_s"] for r in rows)
    return {
        "procs": procs,
        "episodes": episodes * procs,
        "turns": total,
        "wall_s": round(wall, 2),
        "turns_per_s": round(total / wall, 1),
        "driver_cpu_ms_per_turn": round(1e3 * cpu / total, 3),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def table(rows: list[dict]) -> str:
    base = rows[0]["turns_per_s"]
    out = [
        "| driving processes | concurrent episodes | turns | wall s | turns/s | x one process "
        "| driver CPU ms/turn | load avg (1 min) |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        out.append(
            f"| {r['procs']} | {r['episodes']:,} | {r['turns']:,} | {r['wall_s']} "
            f"| {r['turns_per_s']:,} | {r['turns_per_s'] / base:.2f} "
            f"| {r['driver_cpu_ms_per_turn']} | {r['load_1m']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--episodes", type=int, default=256, help="concurrent, per process")
    parser.add_argument("--turns", type=int, default=4, help="model turns per episode")
    parser.add_argument("--tokens-per-turn", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="1 and 2 processes, 32 episodes")
    parser.add_argument("--serve-port", type=int, help=argparse.SUPPRESS)  # a stand-in worker
    args = parser.parse_args(argv)
    if args.serve_port:
        serve(args.serve_port, args.tokens_per_turn)
        return 0
    if args.quick:
        args.procs, args.episodes, args.turns = [1, 2], 64, 4
    from gspo_agents.tracking import BenchProgress

    progress = BenchProgress("driving processes, all rows", sum(args.procs))
    rows = []
    for n in args.procs:
        rows.append(measure(n, args.episodes, args.turns, args.tokens_per_turn))
        progress.tick(progress.done + n)
        print(f"{n} driving processes: {rows[-1]['turns_per_s']} turns/s", file=sys.stderr)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, instant stand-ins")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
