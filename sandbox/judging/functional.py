"""Function-style tests (HumanEval, MBPP, LiveCodeBench, LeetCode): call a function, judge its value.

    program, tests = function_call(source, "Solution.twoSum",
                                   [{"args": [[2, 7, 11], 9], "expected": [0, 1]}])
    program, tests = function_call(source, "add", [{"check": "def check(candidate):\\n"
                                                              "    assert candidate(1, 2) == 3"}])
    result = await sb.run(program, tests)

Two test kinds, one TestCase each:
- value:  {"args": [...]} (positional) or {"kwargs": {...}}, optional "expected". The returned
  value is compared with Python `==` after one normalisation: a tuple equals a list with the same
  items (at any depth, also inside dict values). Everything else is Python's `==`: sets compare
  as sets, 1 == 1.0 == True, dict keys are never stringified ({1: "a"} != {"1": "a"}), NaN never
  equals anything. A value of another type (a custom class) is a wrong answer. Without
  "expected" the test passes when the function returns. Optional "abs_tol" / "rel_tol": numbers
  (at any depth) also match within that tolerance (for `assert abs(f(x) - v) < tol` tests);
  a run with JudgeSpec(mode="float") gives its tolerances to every value test without its own.
  Other JudgeSpec modes do not change how values compare (the tests' output is a verdict line).
- check:  {"check": code}: HumanEval-style test code. When it defines `check`, `check(candidate)`
  runs; otherwise the code runs with `candidate` and the function's own name bound (MBPP-style
  `assert add(1, 2) == 3` lines). AssertionError, or any error the test code itself raises
  (e.g. comparing a None it got), is a wrong answer; an exception the submitted function raises
  and the test does not catch is a runtime error. Helpers the test needs (HumanEval/32's `poly`)
  must be defined in the test code: it never sees the submission's namespace. Inside the test
  code, `candidate` returns plain values: tuples stay tuples, sets stay sets.

Where the comparison happens and why it cannot be forged: see sandbox/judging/fnharness.py. In short, a
trusted parent process (never running submitted code) holds the result channel and the test
payload; the submission runs in a child that can only send back a value. Each test carries a
random nonce that only the parent sees; the parent prints "<nonce> OK" or "<nonce> WA", which
is the TestCase's expected output. The child's own prints go to stderr.

A syntax error is CE; an exception at import or from the function is RE; exiting (sys.exit,
os._exit) before returning is RE whatever the exit code; a time or memory limit is TLE/MLE as
for any program (the child's CPU time and memory count towards the test's).
"""

from __future__ import annotations

import ast
import json
import math
import secrets
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sandbox.judging import fnharness
from sandbox.types import JudgeSpec, Program, TestCase

HARNESS_SOURCE = Path(fnharness.__file__).read_text()
encode_value = fnharness.encode
decode_value = fnharness.decode
values_equal = fnharness.values_equal
_KEYS = {"args", "kwargs", "expected", "check", "abs_tol", "rel_tol"}


def harness_request(program: Program) -> dict[str, Any] | None:
    """The runner request's "harness" field for a program (None: run it as a script)."""
    if program.entry is None:
        return None
    return {"source": HARNESS_SOURCE, "argv": [program.entry]}


def apply_judge(program: Program, tests: list[TestCase], judge: JudgeSpec) -> list[TestCase]:
    """JudgeSpec(mode="float") on function-style value tests: its tolerances apply to the
    numbers they compare (a test's own abs_tol / rel_tol wins). Other modes change nothing."""
    if program.entry is None or judge.mode != "float":
        return tests
    out = []
    for test in tests:
        try:
            payload = json.loads(test.stdin)
        except ValueError:
            payload = None
        if isinstance(payload, dict) and "expected" in payload:
            payload.setdefault("abs_tol", judge.abs_tol)
            payload.setdefault("rel_tol", judge.rel_tol)
            test = TestCase(json.dumps(payload), test.expected)
        out.append(test)
    return out


def function_program(source: str, function_name: str) -> Program:
    """A Python program whose tests call `function_name` ('f' or 'Class.method')."""
    return Program("python", source, entry=function_name)


def function_tests(cases: Iterable[Mapping[str, Any]]) -> list[TestCase]:
    """Rows {"args": [...] | "kwargs": {...}, "expected"?: value} or {"check": code} -> tests."""
    return [_test(index, case) for index, case in enumerate(cases)]


def function_call(
    source: str, function_name: str, cases: Sequence[Mapping[str, Any]]
) -> tuple[Program, list[TestCase]]:
    """Both halves at once: `sb.run(*function_call(src, "f", [{"args": [1], "expected": 2}]))`."""
    return function_program(source, function_name), function_tests(cases)


def function_case(test: TestCase) -> dict[str, Any]:
    """The row a function-style TestCase was made from (for inspection and tests): {"args" |
    "kwargs", "expected"?, "abs_tol"?, "rel_tol"?} or {"check"}. Raises ValueError otherwise."""
    try:
        payload = json.loads(test.stdin)
        if "check" in payload:
            return {"check": payload["check"]}
        args = decode_value(payload["args"])
        row = {"kwargs" if isinstance(args, dict) else "args": args}
        if "expected" in payload:
            row["expected"] = decode_value(payload["expected"])
        return row | {k: payload[k] for k in ("abs_tol", "rel_tol") if k in payload}
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a function-style test: {test.stdin[:100]!r}") from exc


def describe_function_test(test: TestCase, function_name: str) -> str:
    """A function-style test as a person reads it: `add(1, 2) == 3`, `f(x=1)`, or the check
    code itself; never the payload (its nonce would tell the program how to forge OK)."""
    case = function_case(test)
    if "check" in case:
        return str(case["check"]).rstrip()
    owner, _, method = function_name.rpartition(".")
    callee = f"{owner}().{method}" if owner else function_name
    args = case.get("args", case.get("kwargs")) or []
    if isinstance(args, dict):
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    else:
        shown = ", ".join(repr(v) for v in args)
    call = f"{callee}({shown})"
    return f"{call} == {case['expected']!r}" if "expected" in case else call


def _test(index: int, case: Mapping[str, Any]) -> TestCase:
    if not isinstance(case, Mapping):
        raise ValueError(f"function test {index}: must be an object, got {case!r:.100}")
    unknown = sorted(set(case) - _KEYS)
    if unknown:
        raise ValueError(f"function test {index}: unknown key(s) {unknown}; known {sorted(_KEYS)}")
    nonce = secrets.token_hex(16)
    if "check" in case:
        return TestCase(_check_payload(index, case, nonce), f"{nonce} OK")
    if "args" in case and "kwargs" in case:
        raise ValueError(f"function test {index}: give 'args' or 'kwargs', not both")
    args = case.get("args", case.get("kwargs"))
    if not isinstance(args, (list, tuple, dict)):
        raise ValueError(
            f"function test {index}: needs 'args' (a list of positional arguments), 'kwargs' "
            f"(an object of keyword arguments) or 'check' (test code), got {case!r:.100}"
        )
    if isinstance(args, dict) and not all(isinstance(k, str) for k in args):
        raise ValueError(f"function test {index}: 'kwargs' keys must be strings")
    positional = list(args) if isinstance(args, tuple) else args
    payload: dict[str, Any] = {"nonce": nonce, "args": _encoded(index, "args", positional)}
    if "expected" not in case:
        return TestCase(json.dumps(payload), None)
    payload["expected"] = _encoded(index, "expected", case["expected"])
    for key in ("abs_tol", "rel_tol"):
        if key in case:
            payload[key] = _tolerance(index, key, case[key])
    return TestCase(json.dumps(payload), f"{nonce} OK")


def _tolerance(index: int, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"function test {index}: '{key}' must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"function test {index}: '{key}' must be finite and >= 0, got {value}")
    return float(value)


def _encoded(index: int, key: str, value: Any) -> str:
    try:
        return encode_value(value).decode()
    except fnharness.Unencodable as exc:
        raise ValueError(f"function test {index}: '{key}' is not a plain value: {exc}") from exc


def _check_payload(index: int, case: Mapping[str, Any], nonce: str) -> str:
    if set(case) != {"check"}:
        raise ValueError(f"function test {index}: 'check' takes no other keys, got {sorted(case)}")
    code = case["check"]
    if not isinstance(code, str):
        raise ValueError(f"function test {index}: 'check' must be Python source (a string)")
    try:
        ast.parse(code)  # trusted test data: a broken test is the caller's error, not CE/WA
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"function test {index}: 'check' code does not parse: {exc}") from exc
    return json.dumps({"nonce": nonce, "check": code})
