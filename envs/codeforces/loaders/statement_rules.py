"""Comparison rules a row's statement states, turned into judge options.

Rows from Codeforces, AtCoder and LeetCode (LiveCodeBench, code_contests, TACO/APPS, open-r1)
carry no judge settings; the statement says how answers are checked, in a few set phrasings:

    "You can output the answer in any case (upper or lower)" / "each letter in any register"
        -> letters compare case-insensitively (the platforms' checkers do)
    "Your answer is considered correct if its absolute or relative error does not exceed 10^{-6}"
        -> float mode with that tolerance (absolute and/or relative as the phrase names)

Only these phrasings are read: a statement without them keeps the exact token comparison.
"""

from __future__ import annotations

import re
from typing import Any

# Only about the output's letters: "In any case, the answer fits in 64 bits" is not a rule.
_ANY_CASE = re.compile(
    r"\b(?:print|output|write|answer|letter|string|word|yes|no)s?\b[^.]{0,80}?"
    r"\b(?:in|of) any (?:letter )?(?:case|register)\b"
    r"|\bany combination of (?:upper|lower)",
    re.IGNORECASE,
)
_ERROR = re.compile(
    r"\b(absolute or relative|relative or absolute|absolute|relative) error\b[^.]{0,60}?"
    r"10\s*\^\s*\{?\s*[-−]\s*(\d{1,2})\b",
    re.IGNORECASE,
)


def judge_from_statement(statement: str) -> dict[str, Any]:
    """The judge fields (Problem.from_row's "judge") a statement's wording asks for."""
    judge: dict[str, Any] = {"mode": "tokens"}
    if _ANY_CASE.search(statement):
        judge["case_sensitive"] = False
    match = _ERROR.search(statement)
    if match:
        kind, tolerance = match.group(1).lower(), 10.0 ** -int(match.group(2))
        judge["mode"] = "float"
        judge["abs_tol"] = tolerance if "absolute" in kind else 0.0
        judge["rel_tol"] = tolerance if "relative" in kind else 0.0
    return judge
