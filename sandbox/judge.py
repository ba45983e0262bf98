"""Output comparison on the host side: the expected output never enters the sandbox.

tokens  whitespace-separated tokens, compared exactly (the default; ignores spacing and newlines)
lines   line by line, exact except trailing whitespace on each line and trailing blank lines
float   tokens; pairs that both parse as floats match within abs_tol or rel_tol, others exactly
checker is not here: a checker is a program and runs in the sandbox (see sandbox.core).
"""

from __future__ import annotations

import math

from sandbox.types import JudgeSpec

_SHOW = 40  # characters of a token shown in a WA message


def _short(text: str) -> str:
    return text if len(text) <= _SHOW else text[:_SHOW] + "..."


def compare(output: str, expected: str, spec: JudgeSpec) -> tuple[bool, str]:
    """Return (accepted, message); the message says where the first difference is."""
    if spec.mode == "lines":
        return _compare_lines(output, expected)
    got, want = output.split(), expected.split()
    for index, (a, b) in enumerate(zip(got, want)):
        same = _floats_close(a, b, spec) if spec.mode == "float" else a == b
        if not same:
            return False, f"token {index + 1} differs: got {_short(a)!r}, expected {_short(b)!r}"
    if len(got) != len(want):
        return False, f"got {len(got)} tokens, expected {len(want)}"
    return True, ""


def _compare_lines(output: str, expected: str) -> tuple[bool, str]:
    got, want = _normalized_lines(output), _normalized_lines(expected)
    for index, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return False, f"line {index + 1} differs: got {_short(a)!r}, expected {_short(b)!r}"
    if len(got) != len(want):
        return False, f"got {len(got)} lines, expected {len(want)}"
    return True, ""


def _normalized_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _floats_close(a: str, b: str, spec: JudgeSpec) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= spec.abs_tol or abs(x - y) <= spec.rel_tol * abs(y)
