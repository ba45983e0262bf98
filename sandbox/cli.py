"""`python -m sandbox run | judge | verify | doctor | serve`: the sandbox as a command-line tool.

Exit codes: 0 success (run: verdict OK; judge: every test passed; doctor: some isolating backend
works), 1 the program failed (any non-OK verdict), 2 usage error, 3 sandbox/system error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from sandbox.core import AUTO_ORDER, LOCAL_BACKENDS, Sandbox, build_backend
from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.isolation import image
from sandbox.judging import verify as verifying
from sandbox.judging.functional import function_call
from sandbox.judging.kattis import PackageError, is_package, load_package, load_validator
from sandbox.judging.verify import run_package
from sandbox.service import main as serve_command
from sandbox.types import JudgeSpec, Limits, Program, RunResult, TestCase, Verdict

EXTENSIONS = {".py": "python", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".c++": "cpp"}
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SYSTEM = 0, 1, 2, 3


class UsageError(ValueError):
    pass


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SandboxError as exc:
        print(f"sandbox error: {exc}", file=sys.stderr)
        return EXIT_SYSTEM


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log backend choices")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", default="auto", choices=LOCAL_BACKENDS)
        p.add_argument(
            "--allow-unsafe-local",
            action="store_true",
            help="permit backend=unsafe-local (NO isolation)",
        )
        p.add_argument(
            "--time-limit", type=float, help="CPU seconds per test (default 2; a package's own)"
        )
        p.add_argument(
            "--memory-limit", type=int, help="MB per process tree (default 256; a package's own)"
        )

    run = sub.add_parser("run", help="run one program, print its output and verdict")
    run.add_argument("file", type=Path)
    run.add_argument("--lang", choices=("python", "cpp"))
    run.add_argument("--stdin", type=Path, help="file fed to the program's stdin")
    common(run)
    run.set_defaults(func=cmd_run)

    judge = sub.add_parser("judge", help="judge a program against tests")
    judge.add_argument("file", type=Path)
    judge.add_argument(
        "--tests",
        type=Path,
        required=True,
        help="a directory of NAME.in + NAME.out/.ans, or a JSONL file",
    )
    judge.add_argument("--lang", choices=("python", "cpp"))
    judge.add_argument(
        "--checker",
        type=Path,
        help="checker program, or a Kattis output validator directory (sources + headers)",
    )
    judge.add_argument(
        "--checker-protocol",
        choices=("testlib", "kattis"),
        help="testlib: argv input output answer, exit 0 = OK; kattis: argv input answer "
        "feedback_dir [flags] < output, exit 42/43 (default: kattis for a directory)",
    )
    judge.add_argument(
        "--function",
        help="function-style tests: call this function "
        "('f' or 'Class.method') with each row's args",
    )
    judge.add_argument("--mode", choices=("tokens", "lines", "float"), default="tokens")
    judge.add_argument("--early-stop", action="store_true")
    judge_options(judge)
    common(judge)
    judge.set_defaults(func=cmd_judge)

    verify = verifying.add_parser(sub)
    verify.add_argument("--backend", default="auto", choices=LOCAL_BACKENDS)
    verify.add_argument("--allow-unsafe-local", action="store_true")
    verify.set_defaults(func=_verify)

    doctor = sub.add_parser("doctor", help="which backends work here, and the image")
    doctor.add_argument("--no-build", action="store_true", help="only check, never build")
    doctor.set_defaults(func=cmd_doctor)

    serve_command.add_parser(sub)
    return parser


def judge_options(p: argparse.ArgumentParser) -> None:
    """Kattis default-validator semantics and the time multiplier, as flags."""
    p.add_argument(
        "--case-insensitive",
        action="store_true",
        help="letters compare case-insensitively (Kattis's default validator)",
    )
    p.add_argument(
        "--space-change-sensitive",
        action="store_true",
        help="the whitespace between tokens must match exactly",
    )
    p.add_argument("--float-tolerance", type=float, help="absolute and relative tolerance")
    p.add_argument("--float-absolute-tolerance", type=float)
    p.add_argument("--float-relative-tolerance", type=float)
    p.add_argument(
        "--validator-flags",
        default="",
        help="extra arguments for a checker (Kattis output_validator_flags)",
    )
    p.add_argument(
        "--time-multiplier", type=float, default=1.0, help="scale the time limit by this factor"
    )


def _verify(args: argparse.Namespace) -> int:
    try:
        return verifying.cmd_verify(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


# ---- helpers --------------------------------------------------------------------------------
def load_program(path: Path, lang: str | None) -> Program:
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    language = lang or EXTENSIONS.get(path.suffix.lower())
    if language is None:
        raise UsageError(f"{path}: cannot tell the language from {path.suffix!r}; pass --lang")
    return Program(language, path.read_text())  # type: ignore[arg-type]


def make_sandbox(args: argparse.Namespace, max_concurrency: int = 1) -> Sandbox:
    return Sandbox.create(
        args.backend, max_concurrency=max_concurrency, allow_unsafe_local=args.allow_unsafe_local
    )


def limits_of(
    args: argparse.Namespace, time_s: float | None = None, memory_mb: int | None = None
) -> Limits:
    """The command line's limits; where it gives none, `time_s`/`memory_mb` (a package's), else
    2 s and 256 MB."""
    try:
        scale = getattr(args, "time_multiplier", 1.0)
        if not scale > 0:
            raise ValueError(f"--time-multiplier {scale} must be positive")
        time_s = args.time_limit if args.time_limit is not None else (time_s or 2.0)
        memory_mb = args.memory_limit if args.memory_limit is not None else (memory_mb or 256)
        return Limits(time_s=time_s * scale, memory_mb=memory_mb)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


async def _run_once(
    args: argparse.Namespace,
    program: Program,
    tests: list[TestCase],
    judge: JudgeSpec,
    early_stop: bool = False,
) -> RunResult:
    async with make_sandbox(args) as sb:
        return await sb.run(program, tests, limits_of(args), judge, early_stop=early_stop)


def _exit_code(result: RunResult) -> int:
    if result.verdict is Verdict.SE:
        return EXIT_SYSTEM
    return EXIT_OK if result.verdict is Verdict.OK else EXIT_FAILED


# ---- run ------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    program = load_program(args.file, args.lang)
    stdin = (
        args.stdin.read_text() if args.stdin else ("" if sys.stdin.isatty() else sys.stdin.read())
    )
    result = asyncio.run(_run_once(args, program, [TestCase(stdin)], JudgeSpec()))
    if result.verdict is Verdict.CE:
        print(result.compile_output, file=sys.stderr, end="")
        print("verdict: CE", file=sys.stderr)
        return EXIT_FAILED
    test = result.tests[0]
    sys.stdout.write(test.stdout)
    sys.stderr.write(test.stderr)
    detail = f" ({test.message})" if test.message else ""
    print(
        f"verdict: {result.verdict.value}{detail}  time {test.time_s:.3f}s  memory "
        f"{test.memory_mb:.1f}MB  exit {test.exit_code}  backend {result.backend}",
        file=sys.stderr,
    )
    return _exit_code(result)


# ---- judge ----------------------------------------------------------------------------------
def load_tests(path: Path) -> list[dict[str, Any]]:
    """Rows with "stdin"/"expected" (or "args"/"kwargs"/"expected" for function tests)."""
    if path.is_dir():
        return _tests_from_dir(path)
    if not path.is_file():
        raise UsageError(f"--tests {path}: no such file or directory")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{number}: not JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise UsageError(f"{path}:{number}: each line must be a JSON object")
        if "input" in row or "output" in row:  # the common {"input", "output"} spelling
            row = {
                "stdin": row.get("input", ""),
                "expected": row.get("output"),
                **{k: v for k, v in row.items() if k not in ("input", "output")},
            }
        rows.append(row)
    if not rows:
        raise UsageError(f"{path}: no tests found")
    return rows


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _tests_from_dir(path: Path) -> list[dict[str, Any]]:
    """NAME.in (+ NAME.out / NAME.ans) in `path`; a Kattis-style directory (a package, or its
    data/) contributes sample/ first, then secret/ and its groups, in natural order."""
    data = path / "data" if (path / "data").is_dir() else path
    inputs_nested = (data / "sample").is_dir() or (data / "secret").is_dir()
    if inputs_nested:
        inputs = [
            inp
            for part in ("sample", "secret")
            if (data / part).is_dir()
            for inp in sorted(
                (data / part).rglob("*.in"), key=lambda p: _natural(str(p.relative_to(data)))
            )
        ]
    else:
        inputs = sorted(path.glob("*.in"), key=lambda p: _natural(p.name))
    rows = []
    for inp in inputs:
        answer = next(
            (inp.with_suffix(s) for s in (".out", ".ans") if inp.with_suffix(s).exists()), None
        )
        name = str(inp.relative_to(data).with_suffix("")) if inputs_nested else inp.stem
        rows.append(
            {
                "stdin": inp.read_text(),
                "expected": answer.read_text() if answer else None,
                "name": name,
            }
        )
    if not rows:
        raise UsageError(f"{path}: no NAME.in files found (also looked in sample/ and secret/)")
    return rows


def cmd_judge(args: argparse.Namespace) -> int:
    if is_package(args.tests) and not args.function:
        return _judge_package(args)
    rows = load_tests(args.tests)
    if args.function:
        source = load_program(args.file, args.lang or "python").source
        try:
            program, tests = function_call(source, args.function, rows)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    else:
        program = load_program(args.file, args.lang)
        tests = [TestCase(str(r.get("stdin", "")), r.get("expected")) for r in rows]
    judge = judge_of(args)
    result = asyncio.run(_run_once(args, program, tests, judge, args.early_stop))
    return _report(result, [str(r.get("name", i + 1)) for i, r in enumerate(rows)], len(tests))


def _judge_package(args: argparse.Namespace) -> int:
    """--tests PKG: the package's own judges (validator, flags per test group) unless the
    command line sets a judge option, which then applies to every test."""
    try:
        package = load_package(args.tests, backend=args.backend)
    except (PackageError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    program = load_program(args.file, args.lang)
    if _judge_flags_given(args):
        package = replace(package, test_judges=(judge_of(args),) * len(package.tests))
    else:
        print(f"judge: {package.name}'s own validator and flags (judge options override them)")
    if args.time_limit is None and package.time_limit_s is None:
        print(f"judge: {package.name} has no time limit; using 2 s (--time-limit sets one)")

    async def go() -> RunResult:
        async with make_sandbox(args) as sb:
            limits = limits_of(args, package.time_limit_s, package.memory_mb)
            return await run_package(sb, program, package, limits, args.early_stop)

    return _report(asyncio.run(go()), list(package.test_names), len(package.tests))


def _judge_flags_given(args: argparse.Namespace) -> bool:
    tolerances = (
        args.float_tolerance,
        args.float_absolute_tolerance,
        args.float_relative_tolerance,
    )
    return bool(
        args.checker
        or args.case_insensitive
        or args.space_change_sensitive
        or args.validator_flags
        or args.mode != "tokens"
        or any(t is not None for t in tolerances)
    )


def _report(result: RunResult, names: list[str], total: int) -> int:
    if result.verdict is Verdict.CE:
        print(result.compile_output, end="")
    for i, test in enumerate(result.tests):
        name = names[i] if i < len(names) else str(i + 1)
        note = f"  {test.message}" if test.message else ""
        print(
            f"test {name}: {test.verdict.value}  {test.time_s:.3f}s  {test.memory_mb:.1f}MB{note}"
        )
        if test.verdict is not Verdict.OK and test.stderr.strip():
            print(indented_tail("stderr", test.stderr))
    print(
        f"summary: {result.passed}/{total} passed, verdict {result.verdict.value} "
        f"(backend {result.backend})"
    )
    return _exit_code(result)


STDERR_SHOWN = 2000  # characters of a failed test's stderr printed by `judge` (its tail)


def indented_tail(label: str, text: str, limit: int = STDERR_SHOWN) -> str:
    """The end of `text` (where a traceback's cause is), indented under the test's line."""
    text = text.rstrip()
    cut = len(text) > limit
    shown = text[-limit:] if cut else text
    head = f"  {label} (last {limit} of {len(text)} characters):" if cut else f"  {label}:"
    return head + "\n" + "\n".join("    " + line for line in shown.splitlines())


def judge_of(args: argparse.Namespace) -> JudgeSpec:
    """The JudgeSpec the judge command's flags describe (UsageError names a bad combination)."""
    options: dict[str, Any] = {
        "case_sensitive": not args.case_insensitive,
        "space_change_sensitive": args.space_change_sensitive,
    }
    flags = tuple(args.validator_flags.split())
    if args.checker:
        protocol = args.checker_protocol or ("kattis" if args.checker.is_dir() else "testlib")
        if args.checker.is_dir():
            try:  # built first when Kattis would build it (build/run, several sources)
                checker = load_validator(args.checker, getattr(args, "backend", "auto"))
            except PackageError as exc:
                raise UsageError(str(exc)) from exc
        else:
            checker = load_program(args.checker, None)
        return JudgeSpec(
            mode="checker",
            checker=checker,
            checker_protocol=protocol,  # type: ignore[arg-type]  # argparse choices
            checker_args=flags,
            **options,
        )
    abs_tol = _first(args.float_absolute_tolerance, args.float_tolerance)
    rel_tol = _first(args.float_relative_tolerance, args.float_tolerance)
    mode = "float" if abs_tol is not None or rel_tol is not None else args.mode
    if mode == "float" and args.mode not in ("tokens", "float"):
        raise UsageError(f"--mode {args.mode} cannot take a float tolerance")
    tolerances: dict[str, Any] = {"abs_tol": 1e-6, "rel_tol": 1e-6}
    if abs_tol is not None or rel_tol is not None:  # Kattis: a tolerance not given is off
        tolerances = {"abs_tol": abs_tol or 0.0, "rel_tol": rel_tol or 0.0}
    try:
        return JudgeSpec(mode=mode, **tolerances, **options)  # type: ignore[arg-type]
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


# ---- doctor ---------------------------------------------------------------------------------
def cmd_doctor(args: argparse.Namespace) -> int:
    print(f"rootfs: {image.rootfs_path()} ({'ready' if image.rootfs_ready() else 'missing'})")
    if not args.no_build and os.geteuid() == 0:
        try:
            print(f"rootfs: built/found {image.ensure_rootfs()}")
            if _docker_reachable():
                print(f"image:  {image.ensure_image()} ready")
        except SandboxError as exc:
            print(f"image build failed: {exc}")
    working = []
    for name in AUTO_ORDER:
        try:
            backend = build_backend(name, 1, {})
        except SandboxUnavailable as exc:
            print(f"{name:11s} unavailable: {exc}")
            continue
        asyncio.run(_close(backend))
        working.append(name)
        print(f"{name:11s} OK (whole-tree limits: {backend.cgroup_note})")
    print("unsafe-local available only with --allow-unsafe-local (NO isolation)")
    if working:
        print(f"backend=auto would pick: {working[0]}")
        return EXIT_OK
    print("no isolating backend works here; run `bash .ci/setup_sandbox.sh` as root")
    return EXIT_SYSTEM


def _docker_reachable() -> bool:
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "version"], capture_output=True, timeout=20)
    return probe.returncode == 0


async def _close(backend: Any) -> None:
    await backend.aclose()
