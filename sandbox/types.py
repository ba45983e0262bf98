"""Request and result records of the sandbox API (the contract envs code against)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Literal

Language = Literal["python", "cpp"]
LANGUAGES: tuple[str, ...] = ("python", "cpp")
JUDGE_MODES: tuple[str, ...] = ("tokens", "lines", "float", "checker")
CHECKER_PROTOCOLS: tuple[str, ...] = ("testlib", "kattis")


class Verdict(str, Enum):
    OK = "OK"
    WA = "WA"  # wrong answer
    TLE = "TLE"  # CPU or wall time limit exceeded
    MLE = "MLE"  # memory limit exceeded
    RE = "RE"  # runtime error: non-zero exit or killed by a signal
    CE = "CE"  # compile error (the compiler's message is in RunResult.compile_output)
    OLE = "OLE"  # output limit exceeded
    SE = "SE"  # the sandbox itself failed: an infrastructure error, never a wrong answer


_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


@dataclass(frozen=True, slots=True)
class Program:
    language: Language
    source: str
    # Function-style: call this function ("f", or "Class.method" on a fresh instance) instead of
    # running the script; the tests come from sandbox.judging.functional.function_tests.
    entry: str | None = None

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(
                f"Program.language={self.language!r} is not supported; use one of {LANGUAGES}"
            )
        if not isinstance(self.source, str):
            raise TypeError(f"Program.source must be str, got {type(self.source).__name__}")
        if self.entry is not None:
            if self.language != "python":
                raise ValueError("Program.entry (function-style tests) needs language='python'")
            if not isinstance(self.entry, str) or not _ENTRY.match(self.entry):
                raise ValueError(
                    f"Program.entry={self.entry!r} must look like 'f' or 'Class.method'"
                )


@dataclass(frozen=True, slots=True)
class TestCase:
    __test__ = False  # not a pytest test class

    stdin: str
    expected: str | None = None  # None: just run it (OK if it exits 0 within limits)


@dataclass(frozen=True, slots=True)
class Limits:
    time_s: float = 2.0  # CPU time per test
    memory_mb: int = 256  # resident memory of the whole process tree
    output_bytes: int = 1 << 20  # stdout per test
    processes: int = 128  # processes + threads of the whole tree at once (64 threads work)
    wall_time_s: float | None = None  # default 3 * time_s + 1

    def __post_init__(self) -> None:
        for name in ("time_s", "memory_mb", "output_bytes", "processes"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"Limits.{name}={value!r} must be positive")
        if self.wall_time_s is not None and not self.wall_time_s > 0:
            raise ValueError(f"Limits.wall_time_s={self.wall_time_s!r} must be positive or None")

    @property
    def effective_wall_time_s(self) -> float:
        return self.wall_time_s if self.wall_time_s is not None else 3 * self.time_s + 1


@dataclass(frozen=True, slots=True)
class JudgeSpec:
    mode: Literal["tokens", "lines", "float", "checker"] = "tokens"
    abs_tol: float = 1e-6
    rel_tol: float = 1e-6
    # testlib: argv (input_file, output_file, answer_file); exit 0 = OK, 3 = checker failure,
    # else WA. kattis: argv (input_file, answer_file, feedback_dir, *checker_args) with the
    # program's output on stdin; exit 42 = OK, 43 = WA, anything else = checker failure.
    checker: Program | None = None
    checker_protocol: Literal["testlib", "kattis"] = "testlib"
    checker_args: tuple[str, ...] = ()
    # Kattis default-validator semantics (tokens/float modes): letter case matters only with
    # case_sensitive; with space_change_sensitive the whitespace between tokens must match too.
    case_sensitive: bool = True
    space_change_sensitive: bool = False

    def __post_init__(self) -> None:
        if self.mode not in JUDGE_MODES:
            raise ValueError(f"JudgeSpec.mode={self.mode!r} is unknown; use one of {JUDGE_MODES}")
        if self.checker_protocol not in CHECKER_PROTOCOLS:
            raise ValueError(
                f"JudgeSpec.checker_protocol={self.checker_protocol!r} is unknown; "
                f"use one of {CHECKER_PROTOCOLS}"
            )
        for name in ("abs_tol", "rel_tol"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value >= 0):
                raise ValueError(f"JudgeSpec.{name}={value!r} must be a number >= 0")
        if self.mode == "checker" and self.checker is None:
            raise ValueError("JudgeSpec.mode='checker' needs JudgeSpec.checker=Program(...)")


@dataclass(frozen=True, slots=True)
class TestResult:
    __test__ = False

    verdict: Verdict
    time_s: float
    memory_mb: float
    stdout: str  # truncated to Limits.output_bytes
    stderr: str  # truncated
    exit_code: int | None  # negative: killed by that signal; None: never ran
    message: str = ""
    wall_time_s: float = 0.0  # start to exit (time_s is the tree's CPU time)


@dataclass(frozen=True, slots=True)
class RunResult:
    verdict: Verdict  # first non-OK test's verdict, CE, SE, or OK
    tests: tuple[TestResult, ...]
    compile_output: str = ""
    backend: str = ""

    @property
    def passed(self) -> int:
        return sum(1 for t in self.tests if t.verdict is Verdict.OK)

    @property
    def all_passed(self) -> bool:
        return self.verdict is Verdict.OK
