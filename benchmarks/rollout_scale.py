"""The driving process at scale: CPU per turn over HTTP against the manager's own (issue 33).

Three scans, each against instant SGLang stand-ins in separate processes
(benchmarks/instant_sglang.py: raw asyncio HTTP/1.1, canned answers, so the driver is the
bottleneck), with the project's own RolloutManager + SGLangEngine and a trivial tool env:

- N scan: CPU of the driving process per turn (`time.process_time()`, this process only) at N
  concurrent episodes over HTTP, beside the same run with an in-process instant engine (the
  manager's own cost, no HTTP). Target: HTTP <= 2x the manager's own at N = 1,024.
- History scan: whole-turn client CPU at 1k / 16k / 64k tokens of history over HTTP, as the
  marginal turn: (CPU of episodes of `--turns-long` turns - of `--turns-short` turns) per extra
  turn, so the one-off prompt tokenisation and encoding cancel. Target: 64k <= 1.5x 1k, as the
  median of the rounds' own ratios (each round runs every length back to back). The kernel's
  share (system time) and the cyclic GC's are split out: what grows with history is the body's
  bytes through loopback TCP, whose receiving side runs in the sender's context on one host.
Every row is the median of `--reps` rounds (its range beside it): one round of a few hundred ms
of CPU moves by +-30% on a shared machine.
- Processes scan: 1, 2, 4 driving processes, each with its own stand-in process (rollout_procs).
  Aggregate turns/s; target: 2 processes >= 1.7x one (meaningful only with free cores).

The machine's load is printed with every table: on a shared machine only ratios within one run
mean much. Run:
    python benchmarks/rollout_scale.py              # short (~3 min on 2 loaded cores)
    python benchmarks/rollout_scale.py --full       # N 32..2,048, history 1k..64k, 1/2/4 procs
    python benchmarks/rollout_scale.py --smallest   # a smoke run (the test's)
    python benchmarks/rollout_scale.py --breakdown  # + where an HTTP turn's CPU goes
    ... [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from instant_sglang import launch  # noqa: E402
from rollout_overhead import InstantEngine, InstantEnv  # noqa: E402
from rollout_procs import answer_ids, tokenizer  # noqa: E402

G = 8  # samples per task


class HistoryEnv(InstantEnv):
    """InstantEnv whose system prompt holds about task["history"] tokens of filler."""

    def initial_messages(self, task):
        messages = super().initial_messages(task)
        filler = "word " * int(task.get("history", 0))
        messages[0] = {"role": "system", "content": messages[0]["content"] + filler}
        return messages


def memo_prompts(manager, tok) -> None:
    """Tokenise each distinct prompt once: a 64k-token prompt's one-off rendering would drown
    the per-turn costs the history scan compares (every episode of a row has the same one)."""
    from gspo_agents.rollout.chat import ChatFormat

    class MemoChat(ChatFormat):
        seen: dict = {}

        def prompt_ids(self, messages, tools=None):
            key = repr((messages, tools))
            if key not in self.seen:
                self.seen[key] = super().prompt_ids(messages, tools=tools)
            return list(self.seen[key])

    manager.chat = MemoChat(tok)


def _config(episodes: int, tokens_per_turn: int):
    from gspo_agents.rollout.manager import RolloutConfig

    return RolloutConfig(
        num_samples_per_task=G,
        max_new_tokens_per_turn=tokens_per_turn,
        max_context_tokens=1_000_000,
        max_live_trajectories=episodes,
        trajectory_timeout_s=3600.0,
    )


def _opened(engine) -> int:
    """Connections the engine's /generate client made so far (0 for an in-process engine)."""
    return getattr(getattr(engine, "_gen", None), "opened", 0)


@dataclass(frozen=True)
class Batch:
    """One measured batch: CPU seconds of this process, wall seconds, model turns, the
    connections it had to open (0 when the warm batch did that), and the shares of the CPU
    seconds spent in the kernel (system time: the sockets) and in the cyclic GC."""

    cpu: float
    wall: float
    turns: int
    opened: int
    kernel: float
    gc: float


class GcClock:
    """CPU seconds the cyclic GC spends while it is entered (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0

    def _tick(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._tick)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._tick)


async def run_batch(engine, tok, episodes: int, turns: int, tokens: int, history: int = 0) -> Batch:
    """One batch of `episodes` concurrent episodes, measured after a first batch of the same
    size (connections open, templates compiled, as in a run)."""
    from gspo_agents.rollout.manager import RolloutManager

    manager = RolloutManager(
        engine, lambda: HistoryEnv(max_turns=turns), tok, _config(episodes, tokens)
    )
    memo_prompts(manager, tok)
    task = {"turns": turns, "history": history, "id": "0"}  # one prompt for all
    tasks = [dict(task) for _ in range(max(episodes // G, 1))]
    await manager.collect(tasks)  # warm
    opened = _opened(engine)
    cpu, wall, kernel = time.process_time(), time.perf_counter(), os.times().system
    with GcClock() as collector:
        result = await manager.collect(tasks)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    kernel = os.times().system - kernel
    opened = _opened(engine) - opened
    await manager.aclose()
    assert result.metrics["rollout/complete"] == len(tasks) * G, result.metrics
    turns_done = int(result.metrics["rollout/turns"])
    return Batch(cpu, wall, turns_done, opened, kernel, collector.seconds)


async def _http_batch(url: str, tok, *args, client: str = "ours", **kw):
    from generate_clients import install

    from gspo_agents.rollout.sglang_engine import SGLangEngine

    engine = SGLangEngine([url], max_connections=4096)
    install(engine, client)
    try:
        return await run_batch(engine, tok, *args, **kw)
    finally:
        await engine.close()


def n_scan(url, tok, answer, sizes, turns, clients, reps, progress) -> list[dict]:
    """Per N: `reps` rounds of (the manager's own, then each client over HTTP), back to back.
    The ratio is the median of the rounds' own ratios: a slow moment of a shared machine moves
    both halves of a round, where a ratio of two medians mixes rounds that saw different loads."""
    rows = []
    for n in sizes:
        own, http = [], {c: [] for c in clients}
        walls, opened = {c: [] for c in clients}, {c: [] for c in clients}
        for _ in range(reps):
            run = run_batch(InstantEngine(answer), tok, n, turns, len(answer))
            b = asyncio.run(run)
            own.append(1e3 * b.cpu / b.turns)
            for client in clients:
                b = asyncio.run(_http_batch(url, tok, n, turns, len(answer), client=client))
                http[client].append(1e3 * b.cpu / b.turns)
                walls[client].append(b.turns / b.wall)
                opened[client].append(b.opened)
            done = b.turns
        own_ms = statistics.median(own)
        for client in clients:
            http_ms = statistics.median(http[client])
            ratios = [h / o for h, o in zip(http[client], own)]
            rows.append(
                {
                    "client": client,
                    "concurrent": n,
                    "turns": done,
                    "http_cpu_ms_per_turn": round(http_ms, 3),
                    "manager_cpu_ms_per_turn": round(own_ms, 3),
                    "ratio": round(statistics.median(ratios), 2),
                    "ratio_range": f"{min(ratios):.2f}-{max(ratios):.2f}",
                    "http_range": f"{min(http[client]):.3f}-{max(http[client]):.3f}",
                    "own_range": f"{min(own):.3f}-{max(own):.3f}",
                    "http_turns_per_s": round(statistics.median(walls[client]), 1),
                    # connections the measured batches made: 0 when they ran on warm ones
                    "connects": max(opened[client]),
                    "load_1m": round(os.getloadavg()[0], 2),
                }
            )
            progress.tick(progress.done + 1)
            print(
                f"N={n} {client}: HTTP {http_ms:.3f} ms/turn, manager {own_ms:.3f} "
                f"(medians of {reps}), x {statistics.median(ratios):.2f} (median of rounds)",
                file=sys.stderr,
            )
    return rows


class CannedPost:
    """SGLangEngine's /generate client replaced by one recorded answer of the stand-in: the
    engine's own Python (body, answer parse, bookkeeping) without the socket."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer
        self.on_request: list = []
        self.opened = 0

    async def post(self, url, body, headers):
        await asyncio.sleep(0)  # one trip through the event loop, as the socket's answer makes
        return 200, self._answer

    async def aclose(self) -> None: ...


async def _canned_answer(url: str, tokens: int, stop: int) -> bytes:
    """One real /generate answer of the stand-in, as bytes."""
    from gspo_agents.rollout.engine import SamplingParams
    from gspo_agents.rollout.sglang_body import EncodedPrefixes
    from gspo_agents.rollout.sglang_engine import SGLangEngine
    from gspo_agents.rollout.sglang_wire import generate_rest

    engine = SGLangEngine([url])
    try:
        rest = generate_rest(SamplingParams(max_new_tokens=tokens, stop_token_ids=(stop,)), "r0")
        body = EncodedPrefixes().body("k", list(range(100, 110)), rest)
        headers = {"content-type": "application/json"}
        status, answer = await engine._gen.post(url + "/generate", body, headers)
    finally:
        await engine.close()
    assert status == 200, (status, answer[:200])
    return answer


def breakdown(url, tok, answer, n: int, turns: int, reps: int, progress) -> list[dict]:
    """Where an HTTP turn's CPU goes at N = `n`: per round, the manager alone (instant engine),
    then SGLangEngine with its /generate client replaced by the stand-in's recorded answer
    (CannedPost), then SGLangEngine over HTTP; medians of `reps` rounds, system time beside.
    What each adds is the median of the rounds' own differences (one slow moment moves a round)."""
    from gspo_agents.rollout.sglang_engine import SGLangEngine

    canned = asyncio.run(_canned_answer(url, len(answer), answer[-1]))

    async def canned_batch():
        engine = SGLangEngine([url], max_connections=4096)
        await engine.start()
        engine._gen = CannedPost(canned)
        try:
            return await run_batch(engine, tok, n, turns, len(answer))
        finally:
            await engine.close()

    kinds = {
        "the manager alone (instant engine)": lambda: run_batch(
            InstantEngine(answer), tok, n, turns, len(answer)
        ),
        "+ SGLangEngine, recorded answer (no socket)": canned_batch,
        "+ the socket (HTTP to the stand-in)": lambda: _http_batch(url, tok, n, turns, len(answer)),
    }
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    kernel: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(reps):
        for kind, make in kinds.items():
            b = asyncio.run(make())
            cpu[kind].append(1e3 * b.cpu / b.turns)
            kernel[kind].append(1e3 * b.kernel / b.turns)
    rows, previous = [], [0.0] * reps
    for kind in kinds:
        # what this kind adds to the one before, round by round (they ran back to back)
        added = [now - before for now, before in zip(cpu[kind], previous)]
        rows.append(
            {
                "concurrent": n,
                "what runs": kind,
                "cpu_ms_per_turn": round(statistics.median(cpu[kind]), 3),
                "range": f"{min(cpu[kind]):.3f}-{max(cpu[kind]):.3f}",
                "added_ms": round(statistics.median(added), 3),
                "added_range": f"{min(added):.3f}-{max(added):.3f}",
                "kernel_ms": round(statistics.median(kernel[kind]), 3),
                "load_1m": round(os.getloadavg()[0], 2),
            }
        )
        previous = cpu[kind]
    progress.tick(progress.done + 1)
    return rows


def history_scan(url, tok, answer, histories, episodes, short, long, reps, progress) -> list[dict]:
    """Per round, every history length back to back, each as a pair of batches (episodes of
    `short` turns, then of `long`): the marginal turn. The ratio to the first length is the
    median of the rounds' own ratios: the machine's speed drifts by +-30% between rounds, much
    more than what the history adds, and a round's lengths run within seconds of each other."""
    per: dict[int, dict[str, list[float]]] = {
        h: {"cpu": [], "kernel": [], "gc": []} for h in histories
    }
    for _ in range(reps):
        for h in histories:
            short_b = asyncio.run(_http_batch(url, tok, episodes, short, len(answer), history=h))
            long_b = asyncio.run(_http_batch(url, tok, episodes, long, len(answer), history=h))
            extra = long_b.turns - short_b.turns
            per[h]["cpu"].append(1e3 * (long_b.cpu - short_b.cpu) / extra)
            per[h]["kernel"].append(1e3 * (long_b.kernel - short_b.kernel) / extra)
            per[h]["gc"].append(1e3 * (long_b.gc - short_b.gc) / extra)
            progress.tick(progress.done + 1)
    first = per[histories[0]]
    first_user = [c - k for c, k in zip(first["cpu"], first["kernel"])]
    rows = []
    for h in histories:
        cpu, kernel = per[h]["cpu"], per[h]["kernel"]
        user = [c - k for c, k in zip(cpu, kernel)]
        ratios = [c / b for c, b in zip(cpu, first["cpu"])]
        user_ratios = [u / b for u, b in zip(user, first_user) if b > 0]
        rows.append(
            {
                "history_tokens": h,
                "episodes": episodes,
                "marginal_cpu_ms_per_turn": round(statistics.median(cpu), 3),
                "range": f"{min(cpu):.3f}-{max(cpu):.3f}",
                # of which system time (the body's bytes through the kernel's TCP on loopback,
                # which runs the receiving side's TCP in the sender's context), and the rest
                "kernel_ms": round(statistics.median(kernel), 3),
                "user_ms": round(statistics.median(user), 3),
                # of the CPU: the cyclic GC (mostly its first passes over each episode's new
                # history lists, which the long batch's extra collections make; gc.callbacks)
                "gc_ms": round(statistics.median(per[h]["gc"]), 3),
                "load_1m": round(os.getloadavg()[0], 2),
                # medians of the rounds' own ratios to the first length
                "x_first": round(statistics.median(ratios), 2),
                "x_range": f"{min(ratios):.2f}-{max(ratios):.2f}",
                "user_x_first": round(statistics.median(user_ratios), 2) if user_ratios else None,
            }
        )
        print(
            f"history {h}: {statistics.median(cpu):.3f} ms/turn, x {rows[-1]['x_first']} "
            f"(medians of {reps} rounds)",
            file=sys.stderr,
        )
    return rows


def procs_scan(
    procs: list[int], episodes: int, turns: int, tokens: int, reps: int, progress
) -> list[dict]:
    import rollout_procs

    return rollout_procs.measure_rounds(procs, reps, episodes, turns, tokens, progress=progress)


def markdown(title: str, rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    out = [f"### {title}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += [
        "| " + " | ".join(f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for k in keys) + " |"
        for r in rows
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 256, 1024])
    parser.add_argument("--histories", type=int, nargs="+", default=[1024, 16384, 65536])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--turns", type=int, default=4, help="model turns per episode (N scan)")
    parser.add_argument("--history-episodes", type=int, default=32)
    parser.add_argument("--turns-short", type=int, default=2)
    parser.add_argument("--turns-long", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3, help="rounds per row (medians reported)")
    parser.add_argument("--proc-episodes", type=int, default=256, help="per driving process")
    parser.add_argument("--proc-turns", type=int, default=32, help="turns per episode (procs)")
    parser.add_argument("--tokens-per-turn", type=int, default=32)
    parser.add_argument(
        "--clients",
        nargs="+",
        default=["ours"],
        choices=["ours", "aiohttp", "httpx"],
        help="/generate clients of the N scan (benchmarks/generate_clients.py)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also: where an HTTP turn's CPU goes at the largest N (manager, engine, socket)",
    )
    parser.add_argument("--full", action="store_true", help="N 32..2,048, 1/2/4 processes")
    parser.add_argument("--smallest", action="store_true", help="one small row of each scan")
    parser.add_argument("--json", help="also write the tables here")
    args = parser.parse_args(argv)
    if args.full:
        args.sizes, args.procs = [32, 128, 512, 1024, 2048], [1, 2, 4]
    if args.smallest:
        args.sizes, args.histories, args.procs = [16], [256], [1]
        args.history_episodes, args.turns_short, args.turns_long, args.proc_episodes = 8, 2, 3, 16
        args.reps, args.proc_turns = 1, 4
    from gspo_agents.components import freeze_startup_objects
    from gspo_agents.tracking import BenchProgress

    tok = tokenizer()
    answer = answer_ids(tok, args.tokens_per_turn)
    freeze_startup_objects()  # as train.py does before it drives episodes
    progress = BenchProgress(
        "rows, all scans",
        len(args.sizes) * len(args.clients)
        + len(args.histories) * args.reps
        + len(args.procs) * args.reps
        + int(args.breakdown),
    )
    with launch(1, answer, answer[-1]) as (url,):
        n_rows = n_scan(url, tok, answer, args.sizes, args.turns, args.clients, args.reps, progress)
        b_rows = (
            breakdown(url, tok, answer, max(args.sizes), args.turns, args.reps, progress)
            if args.breakdown
            else []
        )
        h_rows = history_scan(
            url,
            tok,
            answer,
            args.histories,
            args.history_episodes,
            args.turns_short,
            args.turns_long,
            args.reps,
            progress,
        )
    p_rows = procs_scan(
        args.procs, args.proc_episodes, args.proc_turns, args.tokens_per_turn, args.reps, progress
    )
    with open("/proc/loadavg") as f:
        load = f.read().strip()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, /proc/loadavg: {load}")
    print(markdown("Driver CPU per turn: HTTP vs the manager's own", n_rows), end="\n\n")
    if b_rows:
        print(markdown("Where an HTTP turn's CPU goes", b_rows), end="\n\n")
    print(markdown("Whole-turn client CPU by history (marginal turn, HTTP)", h_rows), end="\n\n")
    print(markdown("Driving processes (each with its own stand-in)", p_rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "load": load,
                    "n_scan": n_rows,
                    "breakdown": b_rows,
                    "history_scan": h_rows,
                    "procs_scan": p_rows,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
