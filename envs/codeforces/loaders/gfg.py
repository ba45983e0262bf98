"""TACO rows from GeeksforGeeks: function-call problems written as assignments -> function tests.

Such a row has no `fn_name`; its starter code is a `class Solution` method ("#User function
Template for python3 ... def maxSum(self, arr, n, k)"), each test input is the driver's
variables as a person writes them, one per line (`n = 5`, `k = 3`, `arr[] = {1, 2, 3}`, strings
bare or quoted, 2-D arrays `{{1, 2}, {3, 4}}`), and each output is what the driver printed
(`9`, `1 2 3`). They are NOT stdin problems: a program reading stdin never sees this text.
A row is taken as one when TACO's `source` is "geeksforgeeks" or its inputs have this shape.

Conversion: the method is `Solution.<name>`; each parameter takes the input variable of the same
name (case and a trailing `[]` ignored; one parameter and one variable pair up by themselves);
the expected value is the printed output read back (one number, one word, or a list of them;
`1 == True` as Python compares). A row that cannot be converted (no Solution method, a parameter
without a variable, a value that is not a number/word/array, a linked list or tree driver) is
refused with the reason, so the loader counts and reports it.
"""

from __future__ import annotations

import re
from typing import Any

from envs.codeforces.loaders.rows import Unsupported

_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:\[\s*\])*\s*=\s*(.*?)\s*$")
_METHOD = re.compile(r"^\s*def\s+(\w+)\s*\(\s*self\s*(?:,([^)]*))?\)", re.MULTILINE)
_NUMBER = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")


def looks_like_assignments(inputs: list[Any]) -> bool:
    """Every input is text whose non-empty lines are all `name = value` (the GfG shape)."""
    if not inputs or not all(isinstance(i, str) for i in inputs):
        return False
    return all(
        all(_ASSIGNMENT.match(line) for line in text.splitlines() if line.strip())
        and any(line.strip() for line in text.splitlines())
        for text in inputs
    )


def convert(starter: str, inputs: list[Any], outputs: list[Any]) -> tuple[str, list[dict]]:
    """(function name, [{"args", "expected"}]) or Unsupported naming what stops it."""
    if not inputs or not all(isinstance(i, str) for i in inputs):
        raise Unsupported("GeeksforGeeks row whose inputs are not `name = value` text")
    method = _METHOD.search(starter)
    if "class Solution" not in starter or method is None:
        raise Unsupported(
            "GeeksforGeeks-style inputs but no `class Solution` method in starter_code"
        )
    params = [p.split("=")[0].split(":")[0].strip() for p in (method.group(2) or "").split(",")]
    params = [p for p in params if p]
    if re.search(r"^\s*class\s+(?!Solution\b)\w+", starter, re.MULTILINE):
        raise Unsupported("the starter code defines its own classes (a linked list or tree driver)")
    cases = []
    for text, output in zip(inputs, outputs):
        variables = _variables(text)
        cases.append({"args": _arguments(params, variables), "expected": _printed(output)})
    return f"Solution.{method.group(1)}", cases


def _variables(text: str) -> dict[str, Any]:
    out = {}
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)
        if match:
            out[match.group(1).lower()] = _value(match.group(2))
    return out


def _arguments(params: list[str], variables: dict[str, Any]) -> list[Any]:
    if len(params) == 1 and len(variables) == 1:
        return list(variables.values())
    missing = [p for p in params if p.lower() not in variables]
    if missing:
        raise Unsupported(
            f"parameters {missing} of the Solution method have no input variable of that name "
            f"(the inputs name {sorted(variables)})"
        )
    return [variables[p.lower()] for p in params]


def _value(text: str) -> Any:
    text = text.strip().rstrip(",")
    if text.startswith(("{", "[")):
        return _array(text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if _NUMBER.fullmatch(text):
        return _number(text)
    if re.fullmatch(r"[^\s{}\[\]()=,]+", text):
        return text  # a bare word: a string
    raise Unsupported(f"cannot read the input value {text[:60]!r}")


def _array(text: str) -> list[Any]:
    """`{1, 2}` / `[1, 2]` / `{{1, 2}, {3}}` with numbers, quoted or bare words."""
    tokens = re.findall(r"[{\[]|[}\]]|\"[^\"]*\"|'[^']*'|[^,{}\[\]\s]+", text)
    stack: list[list[Any]] = [[]]
    for token in tokens:
        if token in "{[":
            stack.append([])
        elif token in "}]":
            if len(stack) < 2:
                raise Unsupported(f"unbalanced brackets in {text[:60]!r}")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(_value(token))
    if len(stack) != 1 or len(stack[0]) != 1:
        raise Unsupported(f"cannot read the array {text[:60]!r}")
    return stack[0][0]


def _printed(output: Any) -> Any:
    """The value the driver printed: one number or word, else the list of its tokens."""
    if isinstance(output, list) and len(output) == 1:
        output = output[0]
    if not isinstance(output, str):
        return output
    tokens = output.split()
    values = [_number(t) if _NUMBER.fullmatch(t) else t for t in tokens]
    if not values:
        raise Unsupported("an empty expected output")
    return values[0] if len(values) == 1 else values


def _number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)
