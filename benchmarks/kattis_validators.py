"""Cost of a Kattis output validator that is built (build/run scripts) against a one-file one.

    python benchmarks/kattis_validators.py --backend bubblewrap --tests 50 --repeats 3

The same C++ validator judges the same program on `tests` tests twice: as one source (compiled
once through the compile cache, run directly) and as a directory with `build`/`run` scripts
(built once in the sandbox, run through the Python launcher that unpacks it per test;
sandbox/judging/kattis_build.py). Prints the wall time per test of each and the difference: the
launcher's per-test overhead. Builds and compiles happen before the timed runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from gspo_agents.tracking import BenchProgress
from sandbox import JudgeSpec, Program, Sandbox, TestCase, Verdict
from sandbox.judging.kattis import load_validator

VALIDATOR = r"""#include <cstdio>
int main(int argc, char** argv) {
    FILE* ans = std::fopen(argv[2], "r");
    long long want, got;
    if (std::fscanf(ans, "%lld", &want) != 1) return 1;
    return std::scanf("%lld", &got) == 1 && got == want ? 42 : 43;
}
"""
PROGRAM = Program("python", "print(int(input()) * 2)")


def validators(root: Path) -> dict[str, Path]:
    single = root / "single"
    built = root / "built"
    for folder in (single, built):
        folder.mkdir()
        (folder / "check.cpp").write_text(VALIDATOR)
    for name, text in (
        ("build", "#!/bin/sh\ng++ -O2 -o check check.cpp\n"),
        ("run", '#!/bin/sh\nexec "$(dirname "$0")/check" "$@"\n'),
    ):
        (built / name).write_text(text)
        os.chmod(built / name, 0o755)
    return {"one source": single, "build/run": built}


async def time_per_test(
    sb: Sandbox, judge: JudgeSpec, tests: list[TestCase], repeats: int
) -> float:
    await sb.run(PROGRAM, tests[:1], judge=judge)  # warm: compile, build, containers
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = await sb.run(PROGRAM, tests, judge=judge)
        walls.append(time.perf_counter() - started)
        assert result.verdict is Verdict.OK, result
    return statistics.median(walls) / len(tests)


async def main(args: argparse.Namespace) -> None:
    tests = [TestCase(f"{i}\n", f"{2 * i}\n") for i in range(args.tests)]
    with tempfile.TemporaryDirectory() as tmp:
        found = {}
        async with Sandbox.create(args.backend, max_concurrency=1) as sb:
            folders = validators(Path(tmp))
            progress = BenchProgress("validators", len(folders))
            progress.tick(0)
            for label, folder in folders.items():
                checker = load_validator(folder, args.backend)
                judge = JudgeSpec(mode="checker", checker=checker, checker_protocol="kattis")
                found[label] = await time_per_test(sb, judge, tests, args.repeats)
                progress.tick()
    for label, seconds in found.items():
        print(f"{label:>10}: {seconds * 1000:.1f} ms per test (program + validator)")
    print(f"launcher overhead: {(found['build/run'] - found['one source']) * 1000:.1f} ms per test")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="bubblewrap")
    parser.add_argument("--tests", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
