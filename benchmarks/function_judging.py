"""Throughput of function-style judging (the RL reward path for HumanEval/LeetCode-style tasks).

    python benchmarks/function_judging.py --backend docker --submissions 16 --tests 8

Runs `submissions` copies of a small correct solution, each against `tests` value tests, with
`--concurrency` runs at once, and prints tests per second and the mean wall time per run. Uses only
the public API (`function_call` + `Sandbox.run`), so pointing PYTHONPATH at an older checkout
measures that version's harness the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from gspo_agents.tracking import BenchProgress
from sandbox import Sandbox, Verdict
from sandbox.judging.functional import function_call

SOURCE = """
class Solution:
    def twoSum(self, nums, target):
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i
"""


def cases(count: int) -> list[dict[str, object]]:
    return [{"args": [[1, 50, 70, 99 + i], 100 + i], "expected": [0, 3]} for i in range(count)]


async def main(args: argparse.Namespace) -> None:
    async with Sandbox.create(args.backend, max_concurrency=args.concurrency) as sb:
        program, tests = function_call(SOURCE, "Solution.twoSum", cases(args.tests))
        await sb.run(program, tests)  # warm-up: containers, page cache
        progress = BenchProgress("submissions", args.submissions, min_interval_s=2.0)

        async def judged():
            result = await sb.run(program, tests)
            progress.tick()
            return result

        started = time.perf_counter()
        results = await asyncio.gather(*(judged() for _ in range(args.submissions)))
        wall = time.perf_counter() - started
    assert all(r.verdict is Verdict.OK for r in results), [r.verdict for r in results]
    total = args.submissions * args.tests
    print(
        f"backend={args.backend} submissions={args.submissions} tests={args.tests} "
        f"concurrency={args.concurrency}: {total / wall:.1f} tests/s, "
        f"{wall / args.submissions * args.concurrency:.3f} s per run (wall {wall:.1f} s)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--submissions", type=int, default=16)
    parser.add_argument("--tests", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
