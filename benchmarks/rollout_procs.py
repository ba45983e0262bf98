"""Aggregate turns/s of 1, 2 and 4 driving processes against instant SGLang stand-ins.

Each driving process owns an event loop, a `RolloutManager`, its envs and an `SGLangEngine`
client, and drives its share of the episodes (as a learner rank drives groups g % world).
The engine is benchmarks/instant_sglang.py (its C twin where a compiler is: canned /generate
answers, as cheap per request as a server gets), one stand-in worker process per driving
process, so what is measured is the driving: HTTP client, manager, chat formatting, env steps.
A barrier starts the drivers together; aggregate turns/s = all turns / (last finish - first
start). On a shared machine the load average is printed with each row: the ratio means
something only when cores are free.

Each row is the median of `--reps` interleaved rounds (one round of ~2 s moved by +-20% here);
"x one process" is the median of the per-round ratios (round i of every row ran back to back).
Each row also gives the stand-ins' CPU per turn (from /proc) and the ceiling it leaves:
P drivers on C cores carry at most min(P, C * d / (d + s)) times one driver's turns/s, d and s
the driver's and the stand-in's CPU per turn (a lone driver is one busy core, its stand-in on
another; P drivers and their stand-ins share the C cores).

Run:  python benchmarks/rollout_procs.py [--procs 1 2 4] [--episodes 256] [--turns 16] [--quick]
Target (issue 33): two driving processes carry >= 1.7x one process's turns/s.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from instant_sglang import launch  # noqa: E402


def answer_ids(tokenizer, tokens_per_turn: int) -> list[int]:
    from gspo_agents.rollout.chat import ChatFormat

    stop = ChatFormat(tokenizer).stop_token_ids[0]
    ids = tokenizer.encode(" Let me compute: print(12 * 34)", add_special_tokens=False)
    return (ids * tokens_per_turn)[: tokens_per_turn - 1] + [stop]


@functools.cache
def tokenizer():
    from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model

    return load_tokenizer(resolve_model(ModelConfig(name="tiny")))


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
    answer = answer_ids(tokenizer(), tokens_per_turn)
    with launch(procs, answer, answer[-1]) as urls:
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
        standin_cpu = urls.cpu_seconds()  # the drivers' warm-up included: a few turns of each
    wall = max(r["finished"] for r in rows) - min(r["started"] for r in rows)
    total = sum(r["turns"] for r in rows)
    d_ms = 1e3 * sum(r["cpu_s"] for r in rows) / total
    s_ms = 1e3 * standin_cpu / total
    cores = os.cpu_count() or 1
    return {
        "procs": procs,
        "episodes": episodes * procs,
        "turns": total,
        "wall_s": round(wall, 2),
        "turns_per_s": round(total / wall, 1),
        "driver_cpu_ms_per_turn": round(d_ms, 3),
        "standin_cpu_ms_per_turn": round(s_ms, 3),
        # What `procs` drivers could carry over one, were nothing else on the machine: each
        # driver is one busy core, but every turn also costs its stand-in s_ms (nearly all of it
        # the kernel's loopback TCP) on the same cores: min(procs, cores * d / (d + s)).
        "x_ceiling": round(min(procs, cores * d_ms / (d_ms + s_ms)), 2),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def measure_rounds(procs: list[int], reps: int, *args, progress=None) -> list[dict]:
    """`reps` interleaved rounds over `procs` (1, 2, 4, 1, 2, 4, ...: a slow patch of a shared
    machine hits every row alike); per row the round of median turns/s, with the range."""
    runs: dict[int, list[dict]] = {n: [] for n in procs}
    for _ in range(reps):
        for n in procs:
            runs[n].append(measure(n, *args))
            if progress is not None:
                progress.tick(progress.done + 1)
            print(f"{n} driving processes: {runs[n][-1]['turns_per_s']} turns/s", file=sys.stderr)
    rows = []
    for n in procs:
        ordered = sorted(runs[n], key=lambda r: r["turns_per_s"])
        row = dict(ordered[len(ordered) // 2])
        row["range"] = f"{ordered[0]['turns_per_s']:,.0f}-{ordered[-1]['turns_per_s']:,.0f}"
        # Against the first row, round by round: round i of every row ran back to back, so a
        # slow patch of the machine moves both sides of its ratio; the median of those ratios.
        ratios = sorted(
            r["turns_per_s"] / b["turns_per_s"] for r, b in zip(runs[n], runs[procs[0]])
        )
        row["x_first"] = round(statistics.median(ratios), 2)
        row["x_range"] = f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """x one process: the median over rounds of (this row's turns/s / one process's in the same
    round), its range beside it. x ceiling: the most this machine's cores allow (measure())."""
    out = [
        "| driving processes | concurrent episodes | turns | wall s | turns/s | turns/s range "
        "| x one process (median of rounds) | x range | x ceiling here | driver CPU ms/turn "
        "| stand-in CPU ms/turn | load avg (1 min) |",
        "|" + "---|" * 12,
    ]
    for r in rows:
        out.append(
            f"| {r['procs']} | {r['episodes']:,} | {r['turns']:,} | {r['wall_s']} "
            f"| {r['turns_per_s']:,} | {r.get('range', '')} | {r['x_first']:.2f} "
            f"| {r.get('x_range', '')} | {r['x_ceiling']:.2f} | {r['driver_cpu_ms_per_turn']} "
            f"| {r['standin_cpu_ms_per_turn']} | {r['load_1m']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--episodes", type=int, default=256, help="concurrent, per process")
    parser.add_argument("--turns", type=int, default=32, help="model turns per episode")
    parser.add_argument("--reps", type=int, default=5, help="rounds per row (medians reported)")
    parser.add_argument("--tokens-per-turn", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="1 and 2 processes, 32 episodes")
    args = parser.parse_args(argv)
    if args.quick:
        args.procs, args.episodes, args.turns, args.reps = [1, 2], 64, 4, 1
    from gspo_agents.tracking import BenchProgress

    progress = BenchProgress("driving processes, all rounds", len(args.procs) * args.reps)
    rows = measure_rounds(
        args.procs, args.reps, args.episodes, args.turns, args.tokens_per_turn, progress=progress
    )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, instant stand-ins")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
