"""Output comparison on the host side: the expected output never enters the sandbox.

tokens  whitespace-separated tokens, compared exactly (the default; ignores spacing and newlines)
lines   line by line, exact except trailing whitespace on each line and trailing blank lines
float   tokens; where the EXPECTED token is a plain decimal number, the output token must be one
        too and match within abs_tol or rel_tol; other tokens compare as in tokens mode
checker is not here: a checker is a program and runs in the sandbox (see sandbox.core).

Options of tokens/float mode (the Kattis default output validator's flags):
  case_sensitive=False          letters compare case-insensitively (Kattis's default)
  space_change_sensitive=True   the whitespace between tokens must match exactly as well
Numbers are parsed strictly: an optional sign, digits with at most one decimal point, an
optional exponent. Python's float() would also take "1_0", "inf", "nan" and "  1", so a program
could print "1_0" for 10; here those are ordinary tokens that must match the answer's text.
"""

from __future__ import annotations

import re

from sandbox.types import JudgeSpec

_SHOW = 40  # characters of a token shown in a WA message
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SPACE_SPLIT = re.compile(r"(\s+)")


def _short(text: str) -> str:
    return text if len(text) <= _SHOW else text[:_SHOW] + "..."


def compare(output: str, expected: str, spec: JudgeSpec) -> tuple[bool, str]:
    """Return (accepted, message); the message says where the first difference is."""
    if spec.mode == "lines":
        return _compare_lines(output, expected)
    if spec.space_change_sensitive:
        return _compare_spaced(output, expected, spec)
    got, want = output.split(), expected.split()
    for index, (a, b) in enumerate(zip(got, want)):
        if not _same_token(a, b, spec):
            return False, f"token {index + 1} differs: got {_short(a)!r}, expected {_short(b)!r}"
    if len(got) != len(want):
        return False, f"got {len(got)} tokens, expected {len(want)}"
    return True, ""


def _compare_spaced(output: str, expected: str, spec: JudgeSpec) -> tuple[bool, str]:
    """Tokens AND the whitespace runs between them must match (Kattis space_change_sensitive)."""
    got, want = _SPACE_SPLIT.split(output), _SPACE_SPLIT.split(expected)
    for index, (a, b) in enumerate(zip(got, want)):
        if index % 2 == 1 and a != b:  # odd pieces are the whitespace runs
            return (
                False,
                f"whitespace differs after token {index // 2 + 1}: got {a!r}, expected {b!r}",
            )
        if index % 2 == 0 and (a or b) and not _same_token(a, b, spec):
            return (
                False,
                f"token {index // 2 + 1} differs: got {_short(a)!r}, expected {_short(b)!r}",
            )
    if len(got) != len(want):
        return False, "the output ends at a different place than the answer (whitespace counts)"
    return True, ""


def _same_token(a: str, b: str, spec: JudgeSpec) -> bool:
    if spec.mode == "float" and _NUMBER.fullmatch(b):
        return bool(_NUMBER.fullmatch(a)) and _floats_close(float(a), float(b), spec)
    return a == b if spec.case_sensitive else a.casefold() == b.casefold()


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


def _floats_close(x: float, y: float, spec: JudgeSpec) -> bool:
    # Both parsed by _NUMBER, so finite unless they overflow to inf ("1e999"): then only equal.
    if x == y:
        return True
    diff = abs(x - y)
    return diff <= spec.abs_tol or diff <= spec.rel_tol * abs(y)
