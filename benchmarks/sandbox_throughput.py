"""Sandbox throughput: the same A+B tests through every way of running them, one table.

    python benchmarks/sandbox_throughput.py [--tests 200] [--per-submission 20] [--concurrency 4]

Workload: `--tests` tests of a correct A+B in Python and in C++, grouped into submissions of
`--per-submission` tests (as an RL step judges many submissions of a few dozen tests each), with
`--concurrency` submissions in flight. Languages:
  python       the A+B in Python
  cpp          the A+B in C++, a distinct source per submission (a comment with a run nonce and
               the submission's number), so every row compiles once per submission: our
               backends' compile cache (sandbox/judging/compile_cache.py) never hits
  cpp-cached   one C++ source for every submission, as an RL step that resubmits an identical
               program: our backends hit the compile cache (filled in the untimed warm-up) and
               run the cached binary; docker-run and unsandboxed still compile each time, so
               this row's ratios measure the cache, not the isolation
  docker-run   the naive baseline: one `docker run --rm` per test (and per compile), one at a
               time (`--baseline-concurrency`, default 1; the row "docker-run xN" repeats it
               with N in flight, N = --concurrency, for reference)
  docker       our backend: warm container pool, one runner call per submission
  bubblewrap   our backend: one bwrap sandbox per submission
  namespaces   our backend: one unshare+chroot sandbox per submission
  unsandboxed  the floor: a plain host subprocess per test, no runner, no isolation
  remote       the `remote` backend over two `python -m sandbox serve` services on loopback,
               each with the docker backend and half of --concurrency slots (the same number
               of warm containers as the docker row), token checked, over real HTTP
Rows whose backend is unavailable are reported as such. Needs root for namespaces. The rows run
in interleaved rounds (`--concurrency` submissions per row per round), so load that drifts
during the run (other jobs on a shared machine) affects every row alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from loopback_fleet import loopback_fleet

from gspo_agents.tracking import BenchProgress
from sandbox import Program, Sandbox, SandboxError, TestCase
from sandbox.isolation import image

PY_SRC = "a, b = map(int, input().split())\nprint(a + b)\n"
CPP_SRC = '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n'
LANGS = ("python", "cpp", "cpp-cached")
RUN_NONCE = uuid.uuid4().hex  # unique sources must not hit a disk cache left by an earlier run
_submissions = itertools.count()


def source(lang: str) -> tuple[str, str]:
    """(language, source) of one submission: see the module docstring for the three languages."""
    if lang == "python":
        return "python", PY_SRC
    if lang == "cpp-cached":
        return "cpp", CPP_SRC
    return "cpp", CPP_SRC + f"// run {RUN_NONCE} submission {next(_submissions)}\n"


# The floor runs the interpreter directly (a pyenv shim would add a shell script per test).
FLOOR_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def make_tests(n: int) -> list[TestCase]:
    return [TestCase(f"{i} {3 * i + 1}\n", str(4 * i + 1)) for i in range(n)]


def chunks(tests: list[TestCase], size: int) -> list[list[TestCase]]:
    return [tests[i : i + size] for i in range(0, len(tests), size)]


async def bounded(jobs: list[Callable[[], Awaitable[int]]], concurrency: int) -> int:
    """Run the jobs `concurrency` at a time; return the total number of passed tests."""
    sem = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[int]]) -> int:
        async with sem:
            return await job()

    return sum(await asyncio.gather(*(one(j) for j in jobs)))


async def sh(*argv: str, stdin: str = "", cwd: Path | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=cwd,
    )
    out, _ = await proc.communicate(stdin.encode())
    return proc.returncode or 0, out.decode()


# ---- rows -----------------------------------------------------------------------------------
async def via_sandbox(sb: Sandbox, lang: str, subs: list[list[TestCase]], conc: int) -> int:
    async def submit(tests: list[TestCase]) -> int:
        language, text = source(lang)
        return (await sb.run(Program(language, text), tests)).passed  # type: ignore[arg-type]

    return await bounded([lambda t=t: submit(t) for t in subs], conc)


async def via_subprocess(
    lang: str,
    subs: list[list[TestCase]],
    conc: int,
    prefix: Callable[[Path], list[str]],
    workdir: Path,
) -> int:
    """One process per test (plain or `docker run`), compiling C++ once per submission."""

    async def submit(index: int, tests: list[TestCase]) -> int:
        sub = workdir / f"s{index}"
        sub.mkdir()
        os.chmod(sub, 0o777)
        language, text = source(lang)
        if language == "python":
            (sub / "main.py").write_text(text)
            argv = [FLOOR_PYTHON if prefix is plain_prefix else "python3", "main.py"]
        else:
            (sub / "main.cpp").write_text(text)
            code, _ = await sh(
                *prefix(sub), "g++", "-std=c++17", "-O2", "-o", "main", "main.cpp", cwd=sub
            )
            if code:
                return 0
            argv = ["./main"]
        passed = 0
        for test in tests:
            code, out = await sh(*prefix(sub), *argv, stdin=test.stdin, cwd=sub)
            passed += int(code == 0 and out.split() == (test.expected or "").split())
        return passed

    return await bounded([lambda i=i, t=t: submit(i, t) for i, t in enumerate(subs)], conc)


def plain_prefix(sub: Path) -> list[str]:
    return []


def docker_run_prefix(tag: str) -> Callable[[Path], list[str]]:
    def prefix(sub: Path) -> list[str]:
        return [
            "docker",
            "run",
            "--rm",
            "-i",
            "--network",
            "none",
            "-v",
            f"{sub}:/w",
            "-w",
            "/w",
            tag,
        ]

    return prefix


# ---- driver ---------------------------------------------------------------------------------
Result = tuple[float, int] | str  # (tests/s, passed) or why the row could not run


class Row:
    """One way of running tests; `run_round` runs some submissions and returns tests passed."""

    def __init__(self, name: str, args: argparse.Namespace, workdir: Path) -> None:
        self.name, self.args, self.workdir = name, args, workdir
        self.sandbox: Sandbox | None = None
        self.elapsed, self.passed, self.unavailable = 0.0, 0, ""
        self.rounds = 0
        self.fleet: contextlib.ExitStack | None = None

    async def setup(self, lang: str) -> None:
        if self.name in ("unsandboxed", "docker-run", "docker-run-xN"):
            return
        try:
            name, options = self.name, {}
            if name == "docker-default-cgroup":  # Docker's own /docker cgroup nesting
                name, options = "docker", {"cgroup_parent": None}
            if name == "remote":
                options = self._start_fleet()
            self.sandbox = Sandbox.create(name, max_concurrency=self.args.concurrency, **options)  # type: ignore[arg-type]
        except SandboxError as exc:
            self.unavailable = f"unavailable: {exc}".splitlines()[0][:60]
            return
        # Warm-up, untimed: start the whole pool (docker) and fill caches.
        warm = chunks(
            make_tests(self.args.per_submission * self.args.concurrency), self.args.per_submission
        )
        await via_sandbox(self.sandbox, lang, warm, self.args.concurrency)

    async def run_round(self, lang: str, subs: list[list[TestCase]]) -> None:
        if self.unavailable:
            return
        start = time.perf_counter()
        if self.sandbox is not None:
            passed = await via_sandbox(self.sandbox, lang, subs, self.args.concurrency)
        else:
            prefix = (
                plain_prefix
                if self.name == "unsandboxed"
                else docker_run_prefix(image.ensure_image())
            )
            conc = (
                self.args.baseline_concurrency
                if self.name == "docker-run"
                else self.args.concurrency
            )
            workdir = self.workdir / f"{self.name}-{lang}-{self.rounds}"
            workdir.mkdir()
            passed = await via_subprocess(lang, subs, conc, prefix, workdir)
        self.elapsed += time.perf_counter() - start
        self.passed += passed
        self.rounds += 1

    def _start_fleet(self) -> dict[str, object]:
        self.fleet = contextlib.ExitStack()
        slots = max(1, (self.args.concurrency + 1) // 2)
        urls, token = self.fleet.enter_context(
            loopback_fleet(2, backend="docker", max_concurrency=slots)
        )
        return {"urls": urls, "token": token}

    async def close(self) -> Result:
        if self.sandbox is not None:
            await self.sandbox.aclose()
        if self.fleet is not None:
            await asyncio.to_thread(self.fleet.close)
        return self.unavailable or (self.args.tests / self.elapsed, self.passed)


async def measure_language(
    lang: str, names: list[str], args: argparse.Namespace, progress: BenchProgress
) -> dict[str, Result]:
    """All rows in interleaved rounds, so drifting load from other work hits every row alike."""
    workdir = Path(tempfile.mkdtemp(prefix="sbbench-"))
    os.chmod(workdir, 0o755)
    rows = [Row(name, args, workdir) for name in names]
    try:
        for row in rows:
            await row.setup(lang)
        subs = chunks(make_tests(args.tests), args.per_submission)
        for r in range(0, len(subs), args.concurrency):
            for row in rows:
                await row.run_round(lang, subs[r : r + args.concurrency])
            progress.tick(progress.done + len(subs[r : r + args.concurrency]))
        return {row.name: await row.close() for row in rows}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--per-submission", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--baseline-concurrency", type=int, default=1)
    parser.add_argument(
        "--rows",
        default="docker-run,docker-run-xN,docker,remote,bubblewrap,namespaces,unsandboxed",
    )
    args = parser.parse_args()
    rows = args.rows.split(",")
    results: dict[tuple[str, str], Result] = {}
    submissions = len(chunks(make_tests(args.tests), args.per_submission))
    progress = BenchProgress(f"submissions per row ({', '.join(LANGS)})", len(LANGS) * submissions)
    for lang in LANGS:
        for name, result in (await measure_language(lang, rows, args, progress)).items():
            results[name, lang] = result
            print(f"  measured {name:12s} {lang:6s} {result}", file=sys.stderr)
    print_table(rows, results, args)


def print_table(
    rows: list[str],
    results: dict[tuple[str, str], tuple[float, int] | str],
    args: argparse.Namespace,
) -> None:
    print(
        f"\n{args.tests} A+B tests, {args.per_submission} per submission, concurrency "
        f"{args.concurrency} (docker-run: {args.baseline_concurrency}), {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| backend | lang | tests/s | passed | x docker-run | x docker | x unsandboxed |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in rows:
        for lang in LANGS:
            r = results[name, lang]
            if isinstance(r, str):
                print(f"| {name} | {lang} | {r} | | | | |")
                continue
            vs = [results.get((other, lang)) for other in ("docker-run", "docker", "unsandboxed")]
            ratios = [f"{r[0] / o[0]:.2f}" if isinstance(o, tuple) else "-" for o in vs]
            print(f"| {name} | {lang} | {r[0]:.1f} | {r[1]}/{args.tests} | {' | '.join(ratios)} |")


if __name__ == "__main__":
    asyncio.run(main())
