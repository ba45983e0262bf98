"""`python -m sandbox verify PATH`: run a problem set's own submissions and compare verdicts.

PATH is one Kattis / ICPC package or a directory of them (sandbox/judging/kattis.py). Every submission
under submissions/<category>/ in a language we run (Python, C++) is judged on all tests with the
package's limits and validator (early stop on the first failure, as a judge does); its verdict
must be one that the category allows (accepted: OK; wrong_answer: WA; time_limit_exceeded: TLE;
run_time_error: RE or MLE; the folders: sandbox/judging/kattis_submissions.py). Each test is
judged with its group's validator flags (testdata.yaml). One table per problem is printed, with
the first failing test of each submission and why (the validator's judgemessage.txt, the
comparison's message or the program's stderr). Exit status: 0 when every submission matched,
1 on any mismatch, 3 on a sandbox error.

A package without a time limit (only limits.time_multiplier) first runs its accepted
submissions under a generous limit and derives the limit as problemtools does (slowest accepted
time x time_multiplier) from the ones that pass; if none passes, no limit is derived (an error
naming the fix); --write-timelimit stores it in the package's .timelimit file so the loaders use
it too.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path

from sandbox.core import Sandbox
from sandbox.judging.kattis import (
    Package,
    PackageError,
    derive_time_limit,
    find_packages,
    load_package,
)
from sandbox.types import Limits, Program, RunResult, TestResult, Verdict

PROBE_TIME_S = 10.0  # CPU limit while measuring the accepted submissions of a package
EXIT_OK, EXIT_MISMATCH, EXIT_SYSTEM = 0, 1, 3


@dataclass(frozen=True, slots=True)
class Row:
    submission: str
    category: str
    expected: str
    got: str
    slowest_s: float
    matched: bool | None  # None: skipped (a language or folder we do not run)
    feedback: str = ""  # the first failing test and why (validator feedback included)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("verify", help="run a problem set's submissions; exit 1 on a mismatch")
    p.add_argument("path", type=Path, help="a Kattis problem package or a directory of them")
    p.add_argument("--jobs", type=int, default=2, help="submissions judged at once")
    p.add_argument(
        "--time-multiplier",
        type=float,
        default=1.0,
        help="scale every time limit (e.g. 2 on a loaded machine)",
    )
    p.add_argument(
        "--write-timelimit",
        action="store_true",
        help="store a derived time limit in the package's .timelimit",
    )
    return p


def cmd_verify(args: argparse.Namespace) -> int:
    try:
        paths = find_packages(args.path)
        packages = [load_package(p, backend=args.backend) for p in paths]
    except PackageError as exc:
        raise ValueError(str(exc)) from exc
    if args.time_multiplier <= 0:
        raise ValueError(f"--time-multiplier {args.time_multiplier} must be positive")
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs} must be >= 1")
    return asyncio.run(_verify_all(packages, args))


async def _verify_all(packages: list[Package], args: argparse.Namespace) -> int:
    status = EXIT_OK
    sandbox = Sandbox.create(
        args.backend, max_concurrency=args.jobs, allow_unsafe_local=args.allow_unsafe_local
    )
    async with sandbox:
        for package in packages:
            package = await _with_time_limit(package, sandbox, args)
            rows = await _verify(package, sandbox, args.time_multiplier)
            _print_table(package, rows, args.time_multiplier)
            if any(r.got == Verdict.SE.value for r in rows):
                status = EXIT_SYSTEM
            elif any(r.matched is False for r in rows) and status == EXIT_OK:
                status = EXIT_MISMATCH
    return status


async def run_package(
    sandbox: Sandbox, program: Program, package: Package, limits: Limits, early_stop: bool
) -> RunResult:
    """Judge `program` on every test, each with its group's judge (testdata.yaml flags): one
    sandbox run per stretch of tests sharing a judge; with early_stop it ends at a failure."""
    results: list[TestResult] = []
    compile_output, backend = "", sandbox.backend_name
    for judge, indices in package.judge_runs():
        tests = [package.tests[i] for i in indices]
        result = await sandbox.run(program, tests, limits, judge, early_stop=early_stop)
        compile_output, backend = result.compile_output, result.backend
        if result.verdict in (Verdict.CE, Verdict.SE) and not result.tests:
            return result
        results.extend(result.tests)
        if result.verdict is not Verdict.OK and (early_stop or result.verdict is Verdict.SE):
            return RunResult(result.verdict, tuple(results), compile_output, backend)
    verdict = next((t.verdict for t in results if t.verdict is not Verdict.OK), Verdict.OK)
    return RunResult(verdict, tuple(results), compile_output, backend)


async def _with_time_limit(package: Package, sandbox: Sandbox, args: argparse.Namespace) -> Package:
    """Derive a missing time limit from the accepted submissions that PASS under a generous
    limit (problemtools' rule); a failed run says nothing about the time a solution needs."""
    if package.time_limit_s is not None:
        return package
    accepted = [s for s in package.submissions if s.category == "accepted" and s.program]
    if not accepted:
        raise ValueError(
            f"{package.path}: no time limit and no accepted submission to derive one from; "
            "write the limit in seconds to .timelimit"
        )
    limits = Limits(time_s=PROBE_TIME_S, memory_mb=package.memory_mb)
    results = await asyncio.gather(
        *(run_package(sandbox, s.program, package, limits, True) for s in accepted if s.program)
    )
    passed = [r for r in results if r.verdict is Verdict.OK]
    failed = [
        f"{s.path.name}: {r.verdict.value}" for s, r in zip(accepted, results) if r not in passed
    ]
    if failed:
        print(f"{package.name}: accepted submissions that fail, not timed: {', '.join(failed)}")
    if not passed:
        raise ValueError(
            f"{package.path}: no accepted submission passes under {PROBE_TIME_S:g}s, so no time "
            "limit can be derived; fix them or write the limit in seconds to .timelimit"
        )
    slowest = max(_slowest(r) for r in passed)
    derived = derive_time_limit(package, slowest)
    note = ""
    if args.write_timelimit:
        (package.path / ".timelimit").write_text(f"{derived.time_limit_s:g}\n")
        note = f", written to {package.path / '.timelimit'}"
    print(
        f"{package.name}: time limit derived: slowest accepted {slowest:.2f}s x "
        f"{package.time_multiplier:g} = {derived.time_limit_s:g}s{note}"
    )
    return derived


async def _verify(package: Package, sandbox: Sandbox, time_multiplier: float) -> list[Row]:
    assert package.time_limit_s is not None
    limits = Limits(time_s=package.time_limit_s * time_multiplier, memory_mb=package.memory_mb)
    runnable = [s for s in package.submissions if s.program is not None]
    results = await asyncio.gather(
        *(run_package(sandbox, s.program, package, limits, True) for s in runnable if s.program)
    )
    by_path = {s.path: r for s, r in zip(runnable, results)}
    rows = []
    for s in package.submissions:
        name = str(s.path.relative_to(package.path / "submissions"))
        expected = _expected_text(s.expected)
        result = by_path.get(s.path)
        if result is None:
            rows.append(Row(name, s.category, expected, "-", 0.0, None, s.skip_reason))
            continue
        matched = result.verdict in s.expected
        rows.append(
            Row(
                name, s.category, expected, result.verdict.value, _slowest(result), matched,
                _feedback(package, result),
            )
        )  # fmt: skip
    return rows


def _expected_text(expected: tuple[Verdict, ...]) -> str:
    if not expected:
        return "-"
    if len(expected) > 4:  # rejected / mixed without annotation
        return "not OK" if Verdict.OK not in expected else "any"
    return "/".join(v.value for v in expected)


def _feedback(package: Package, result: RunResult) -> str:
    """Where and why the first failing test failed (the validator's judgemessage.txt, the
    comparison's message, or the program's stderr), for the table."""
    for index, test in enumerate(result.tests):
        if test.verdict is not Verdict.OK:
            name = package.test_names[index] if index < len(package.test_names) else index + 1
            why = test.message or test.stderr.strip()[-300:]
            return f"test {name}: {why}"[:600]
    if result.verdict is Verdict.CE:  # the compiler's last lines
        return "\n".join(result.compile_output.strip().splitlines()[-4:])
    return ""


def _slowest(result: RunResult) -> float:
    return max((t.time_s for t in result.tests), default=0.0)


def _print_table(package: Package, rows: list[Row], time_multiplier: float) -> None:
    limit = (package.time_limit_s or 0) * time_multiplier
    print(
        f"\n{package.name} ({package.title}): {len(package.samples)} sample + "
        f"{len(package.secret)} secret tests, time limit {limit:g}s, judge {_judge_name(package)}"
    )
    if not rows:
        print("  (no submissions/)")
        return
    width = max(len(r.submission) for r in rows)
    print(f"  {'submission':<{width}}  {'expected':<12} {'got':<8} {'max time':>8}  result")
    for r in rows:
        result = "skipped" if r.matched is None else ("ok" if r.matched else "MISMATCH")
        if r.matched is None:  # the reason on the row itself
            print(f"  {r.submission:<{width}}  {r.expected:<12} {r.got:<8} {'':>8}  {r.feedback}")
            continue
        print(
            f"  {r.submission:<{width}}  {r.expected:<12} {r.got:<8} {r.slowest_s:>7.2f}s  {result}"
        )
        if r.feedback:
            print("      " + r.feedback.replace("\n", "\n      "))


def _judge_name(package: Package) -> str:
    judge = package.judge
    if judge.mode == "checker":
        return f"output validator ({judge.checker_protocol}) {' '.join(judge.checker_args)}".strip()
    flags = [] if judge.case_sensitive else ["case-insensitive"]
    if judge.space_change_sensitive:
        flags.append("space-change-sensitive")
    if judge.mode == "float":
        flags.append(f"abs_tol {judge.abs_tol:g} rel_tol {judge.rel_tol:g}")
    return f"default validator, {judge.mode}" + (f" ({', '.join(flags)})" if flags else "")
