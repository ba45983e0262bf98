"""Function-style tests (HumanEval / LiveCodeBench): call a named function, compare its value.

`function_program(source, "name")` appends a small driver to a Python solution; each test's stdin
is the JSON-encoded arguments (a list for positional, an object for keyword arguments) and its
expected output the canonical JSON of the expected return value, so the ordinary token judge
compares values exactly (tuples equal lists, dict key order does not matter). A method of a class
is named "Class.method" (LeetCode's "Solution.twoSum"): the class is instantiated with no
arguments first. Whatever the function prints goes to stderr, so it cannot forge the result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sandbox.types import Program, TestCase

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
RESULT_MARKER = "__gspo_result__"

_DRIVER = """

def __gspo_call():
    import json as _json, sys as _sys
    _args = _json.loads(_sys.stdin.read())
    _owner, _, _method = {name!r}.rpartition(".")
    _fn = getattr(globals()[_owner](), _method) if _owner else globals()[_method]
    _real_stdout, _sys.stdout = _sys.stdout, _sys.stderr  # prints must not forge the result
    try:
        _value = _fn(**_args) if isinstance(_args, dict) else _fn(*_args)
    finally:
        _sys.stdout = _real_stdout
    _text = _json.dumps(_value, sort_keys=True, separators=(",", ":")).replace(" ", "\\\\u0020")
    _sys.stdout.write({marker!r} + " " + _text + "\\n")


if __name__ == "__main__":
    __gspo_call()
"""


def canonical_json(value: Any) -> str:
    """The form the driver prints: tuples become lists, keys sorted, and no whitespace at all
    (spaces inside strings are escaped), so the token judge compares it exactly."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).replace(" ", "\\u0020")


def function_program(source: str, function_name: str) -> Program:
    """A Python program that calls `function_name` with the JSON arguments on stdin."""
    if not _NAME.match(function_name):
        raise ValueError(f"function name {function_name!r} must look like 'f' or 'Class.method'")
    driver = _DRIVER.format(name=function_name, marker=RESULT_MARKER)
    return Program("python", source + "\n" + driver)


def function_tests(cases: Iterable[Mapping[str, Any]]) -> list[TestCase]:
    """Rows {"args": [...] | {...}, "expected": value} (key "kwargs" also accepted) -> tests."""
    tests = []
    for index, case in enumerate(cases):
        args = case.get("args", case.get("kwargs"))
        if args is None or not isinstance(args, (list, dict)):
            raise ValueError(
                f"function test {index}: needs 'args' (a JSON list) or 'kwargs' "
                f"(a JSON object), got {case!r:.100}"
            )
        expected = (
            f"{RESULT_MARKER} {canonical_json(case['expected'])}" if "expected" in case else None
        )
        tests.append(TestCase(stdin=json.dumps(args), expected=expected))
    return tests


def function_call(
    source: str, function_name: str, cases: Sequence[Mapping[str, Any]]
) -> tuple[Program, list[TestCase]]:
    """Both halves at once: `sb.run(*function_call(src, "f", [{"args": [1], "expected": 2}]))`."""
    return function_program(source, function_name), function_tests(cases)
