"""The rollout manager's own cost per turn, at 1,000 and 10,000 concurrent trajectories.

A measuring instrument, not a test double for correctness: the engine answers at once (a fixed
list of tokens, after one yield to the event loop) and the environment replies at once, so what
remains is the manager's orchestration — chat formatting of observations (template render +
tokenization), decoding the action, request bookkeeping, budgets, staleness checks, the semaphore,
task scheduling — plus a small, constant cost of the instrument itself (reported separately by
running the same engine and env calls without the manager).

Run:  python benchmarks/rollout_overhead.py [--sizes 1000 10000] [--turns 4] [--json out.json]
Target (issue F4): <= 0.5 ms of manager time per turn on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

from envs.base import TextEnv
from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model
from gspo_agents.rollout.chat import ChatFormat
from gspo_agents.rollout.engine import Generation, SamplingParams
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.tracking import BenchProgress
from gspo_agents.trajectory import Trajectory


class InstantEngine:
    """Answers every request at once with `tokens_per_turn` tokens ending in the stop token."""

    def __init__(self, answer_ids: list[int]) -> None:
        self._answer = answer_ids
        self._logprobs = [-1.0] * len(answer_ids)
        self.calls = 0

    @property
    def weight_version(self) -> int:
        return 0

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str, *, route_key=None
    ):
        self.calls += 1
        await asyncio.sleep(0)  # one trip through the event loop, as any real engine call makes
        n = min(len(self._answer), sampling.max_new_tokens)
        return Generation(self._answer[:n], self._logprobs[:n], "stop", 0)

    async def abort(self, request_id: str | None = None) -> None: ...
    async def pause(self) -> None: ...
    async def resume(self) -> None: ...
    async def update_weights(self, path: str, version: int) -> None: ...
    async def health(self) -> bool:
        return True

    async def close(self) -> None: ...


class InstantEnv(TextEnv):
    """Replies at once with a short tool-style observation; ends after task["turns"] turns."""

    def initial_messages(self, task):
        return [
            {"role": "system", "content": "You are a careful agent. Use the tool."},
            {"role": "user", "content": f"Task {task['id']}: compute 12 * 34 and report it."},
        ]

    def step(self, action: str):
        self.turn += 1
        if self.turn >= self._require_task()["turns"]:
            return [], 1.0, True, False, {}
        obs = [{"role": "user", "content": f"Output of turn {self.turn}: 408\nexit code 0"}]
        return obs, 0.0, False, False, {}

    async def astep(self, action: str):
        await asyncio.sleep(0)
        return self.step(action)


@dataclass(slots=True)
class Row:
    concurrent: int
    turns: int
    wall_s: float
    turns_per_s: float
    ms_per_turn: float  # wall time, manager + instrument, one core
    instrument_ms_per_turn: float  # wall time of the engine and env calls alone
    manager_ms_per_turn: float  # the difference: the manager's own cost (wall)
    manager_cpu_ms_per_turn: float  # the same in CPU time: robust to a busy machine
    rss_mb: float  # resident set after the batch, before it is freed
    rss_growth_mb: float  # over the resident set before the batch
    live_tokens: int  # tokens held by the finished batch's trajectories
    bytes_per_live_token: float
    chat_cpu_ms_per_turn: float  # of which: observation render + tokenize, action decode (CPU)
    retained_after_batch: int  # Trajectory objects still alive once the result is dropped


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def instrument_only(
    engine: InstantEngine, chat: ChatFormat, concurrent: int, turns: int
) -> tuple[float, float]:
    """The engine and env calls of the same workload, without the manager: its baseline cost
    as (wall s, CPU s)."""
    sampling = SamplingParams(16)

    async def one(i: int) -> None:
        env = InstantEnv(max_turns=turns)
        env.reset(options={"task": {"id": str(i), "turns": turns}})
        for _ in range(turns):
            await engine.generate([1, 2, 3], sampling, "r")
            await env.astep("x")
        env.close()

    started, cpu_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(concurrent)))
    return time.perf_counter() - started, time.process_time() - cpu_started


async def measure(tokenizer, concurrent: int, turns: int, tokens_per_turn: int) -> Row:
    chat = ChatFormat(tokenizer)
    answer = tokenizer.encode(" Let me compute: print(12 * 34)", add_special_tokens=False)
    answer = (answer * tokens_per_turn)[: tokens_per_turn - 1] + [chat.stop_token_ids[0]]
    engine = InstantEngine(answer)
    G = 8
    cfg = RolloutConfig(
        num_samples_per_task=G,
        max_new_tokens_per_turn=tokens_per_turn,
        max_context_tokens=100_000,
        max_live_trajectories=concurrent,
    )
    manager = RolloutManager(engine, lambda: InstantEnv(max_turns=turns), tokenizer, cfg)
    tasks = [{"id": str(i), "turns": turns} for i in range(concurrent // G)]
    gc.collect()
    before = rss_mb()
    started, cpu_started = time.perf_counter(), time.process_time()
    result = await manager.collect(tasks)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    after = rss_mb()
    total_turns = int(result.metrics["rollout/turns"])
    assert total_turns == concurrent * turns, result.metrics
    assert result.metrics["rollout/complete"] == concurrent, result.metrics
    live_tokens = sum(t.num_tokens for t in result.trajectories)
    sample = result.trajectories[0]
    del result
    chat_s = chat_cost(chat, sample, turns, repeat=min(concurrent, 2000))
    del sample
    await asyncio.sleep(0)  # the loop's handle that woke us still points at the gather's result
    gc.collect()
    retained = sum(isinstance(o, Trajectory) for o in gc.get_objects())
    base, base_cpu = await instrument_only(engine, chat, concurrent, turns)
    ms = 1e3 * wall / total_turns
    base_ms = 1e3 * base / total_turns
    growth = after - before
    return Row(
        concurrent=concurrent,
        turns=total_turns,
        wall_s=round(wall, 3),
        turns_per_s=round(total_turns / wall, 1),
        ms_per_turn=round(ms, 4),
        instrument_ms_per_turn=round(base_ms, 4),
        manager_ms_per_turn=round(ms - base_ms, 4),
        manager_cpu_ms_per_turn=round(1e3 * (cpu - base_cpu) / total_turns, 4),
        rss_mb=round(after, 1),
        rss_growth_mb=round(growth, 1),
        live_tokens=live_tokens,
        bytes_per_live_token=round(growth * 2**20 / live_tokens, 1),
        chat_cpu_ms_per_turn=round(1e3 * chat_s, 4),
        retained_after_batch=retained,
    )


def chat_cost(chat: ChatFormat, traj: Trajectory, turns: int, repeat: int) -> float:
    """Seconds per turn of the chat formatting the manager does: decode the action, render and
    tokenize the observation (the last turn has no observation)."""
    model_turns = [s.token_ids for s in traj.segments if s.kind == "model"]
    env = InstantEnv(max_turns=turns)
    env.reset(options={"task": {"id": "0", "turns": turns}})
    observations = [env.step("x")[0] for _ in range(turns - 1)]
    started = time.process_time()
    for _ in range(repeat):
        for i, ids in enumerate(model_turns):
            chat.action_text(ids)
            if i < len(observations):
                chat.observation_ids(observations[i], ids)
    return (time.process_time() - started) / (repeat * len(model_turns))


def table(rows: list[Row]) -> str:
    head = (
        "| concurrent trajectories | turns | wall s | turns/s | wall ms/turn (total) "
        "| wall ms/turn (instrument) | wall ms/turn (manager) | CPU ms/turn (manager) "
        "| of which chat formatting (CPU) | RSS MB | RSS growth MB | live tokens "
        "| bytes/live token | retained after batch |"
    )
    out = [head, "|" + "---|" * 14]
    for r in rows:
        out.append(
            f"| {r.concurrent:,} | {r.turns:,} | {r.wall_s} | {r.turns_per_s:,} | {r.ms_per_turn} "
            f"| {r.instrument_ms_per_turn} | {r.manager_ms_per_turn} "
            f"| {r.manager_cpu_ms_per_turn} | {r.chat_cpu_ms_per_turn} "
            f"| {r.rss_mb} | {r.rss_growth_mb} | {r.live_tokens:,} | {r.bytes_per_live_token} "
            f"| {r.retained_after_batch} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--turns", type=int, default=4, help="model turns per trajectory")
    parser.add_argument("--tokens-per-turn", type=int, default=32)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer(resolve_model(ModelConfig(name="tiny")))
    rows = []
    # in trajectories: a row's time grows with its size
    progress = BenchProgress("trajectories, all rows", sum(args.sizes))
    for n in args.sizes:
        rows.append(asyncio.run(measure(tokenizer, n, args.turns, args.tokens_per_turn)))
        progress.tick(progress.done + n)
        row = rows[-1]
        print(
            f"{n:>6} concurrent: manager {row.manager_ms_per_turn} ms/turn wall, "
            f"{row.manager_cpu_ms_per_turn} ms/turn CPU",
            file=sys.stderr,
        )
    print(f"python {sys.version.split()[0]}, pid {os.getpid()}, one event loop on one core")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
