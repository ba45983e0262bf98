"""Output comparison on the host side: the expected output never enters the sandbox.

tokens  whitespace-separated tokens, compared exactly (the default; ignores spacing and newlines)
lines   line by line, exact except trailing whitespace on each line and trailing blank lines
float   tokens; where the EXPECTED token is a number, the output token must be one too and
        match within abs_tol or rel_tol; other tokens compare as in tokens mode
checker is not here: a checker is a program and runs in the sandbox (see sandbox.core).

tokens and float are Kattis's default output validator (problem package format, "Default output
validator specification"; problemtools' default_validator.cc), exactly:
- whitespace is the six ASCII bytes space, \t, \n, \v, \f, \r; any other character (U+00A0,
  U+3000, U+2028, the \x1c-\x1f separators Python's str.split() would take) is part of a token;
- case_sensitive=False folds ASCII letters A-Z only: "STRASSE" != "straße", "É" != "é";
- space_change_sensitive=True: every whitespace run, leading and trailing included, must match;
- a number is what the spec's grammar accepts: sign? (digits* "." digits+ | digits+ "." | digits+)
  ([Ee] sign? digits+)? with ASCII digits only. "1e", "0x10", "inf", "nan", "1_0" and "١٢" are
  not numbers: they are compared as strings. A number beyond the double range ("1e999") is not
  a float either (default_validator.cc: isinf), so it equals only the same string;
- float mode treats every number of the answer as a float (integers too, as the spec says).
"""

from __future__ import annotations

import math
import re

from sandbox.types import JudgeSpec

_SHOW = 40  # characters of a token shown in a WA message
_NUMBER = re.compile(r"[+-]?(?:[0-9]*\.[0-9]+|[0-9]+\.|[0-9]+)(?:[Ee][+-]?[0-9]+)?")
_SPACE = re.compile(r"[ \t\n\v\f\r]+")
_SPACE_SPLIT = re.compile(r"([ \t\n\v\f\r]+)")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _short(text: str) -> str:
    return text if len(text) <= _SHOW else text[:_SHOW] + "..."


def tokens(text: str) -> list[str]:
    """Kattis's tokens: split on ASCII whitespace only."""
    return [t for t in _SPACE.split(text) if t]


def parse_number(token: str) -> float | None:
    """The token's value when the spec's grammar accepts it and it is a finite double."""
    if not _NUMBER.fullmatch(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def compare(output: str, expected: str, spec: JudgeSpec) -> tuple[bool, str]:
    """Return (accepted, message); the message says where the first difference is."""
    if spec.mode == "lines":
        return _compare_lines(output, expected)
    if spec.space_change_sensitive:
        return _compare_spaced(output, expected, spec)
    got, want = tokens(output), tokens(expected)
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
    if spec.mode == "float" and b:
        want = parse_number(b)
        if want is not None:
            got = parse_number(a)
            return got is not None and _floats_close(got, want, spec)
    if spec.case_sensitive:
        return a == b
    return a.translate(_ASCII_LOWER) == b.translate(_ASCII_LOWER)


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
    # Both finite (parse_number); y is the answer's value, the relative error is against it.
    diff = abs(x - y)
    return diff <= spec.abs_tol or diff <= spec.rel_tol * abs(y)
