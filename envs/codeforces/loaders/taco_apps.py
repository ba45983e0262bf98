"""BAAI/TACO and codeparrot/apps rows -> Problems (the two share the row format).

Published fields used: question, input_output (JSON text {"inputs", "outputs", "fn_name"?}),
solutions (JSON text, a list of Python sources), starter_code, difficulty; TACO also has
name, time_limit ("1 second"), memory_limit ("256 megabytes"), tags; APPS has problem_id.
Standard-input rows: each input/output is a string (or a list of lines). Call-based rows
(fn_name set): inputs[i] is the argument list, outputs[i] the return value, which APPS and TACO
often wrap in a one-element list; it is unwrapped, so such a row checks the value itself. A
fn_name of a LeetCode-style class method is called as "Solution.<fn_name>" when the starter
code defines class Solution. The first `num_samples` tests (default 1) become samples.
GeeksforGeeks rows (no fn_name; inputs such as "n = 5\narr[] = {1, 2}") are function-call
problems: converted by loaders/gfg.py into Solution.<method> tests, or refused with the reason;
never loaded as stdin problems.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from envs.codeforces.loaders import gfg
from envs.codeforces.loaders.rows import Unsupported, as_text, convert, json_field, read_rows
from envs.codeforces.loaders.statement_rules import judge_from_statement
from envs.codeforces.problems import Problem
from sandbox.judging.functional import function_tests

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _first_number(text: Any, default: float) -> float:
    match = _NUMBER.search(str(text or ""))
    return float(match.group(0)) if match else default


def _function_name(io: dict[str, Any], starter: str) -> str:
    name = str(io["fn_name"])
    return f"Solution.{name}" if "class Solution" in starter else name


def _tests(io: dict[str, Any], function_name: str | None) -> list[dict[str, str]]:
    inputs, outputs = io.get("inputs") or [], io.get("outputs") or []
    if len(inputs) != len(outputs) or not inputs:
        raise Unsupported(f"input_output has {len(inputs)} inputs and {len(outputs)} outputs")
    if function_name is None:
        return [{"input": as_text(i), "output": as_text(o)} for i, o in zip(inputs, outputs)]
    cases = []
    for args, value in zip(inputs, outputs):
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        cases.append({"args": args if isinstance(args, list) else [args], "expected": value})
    try:
        return [{"input": t.stdin, "output": t.expected or ""} for t in function_tests(cases)]
    except (TypeError, ValueError) as exc:
        raise Unsupported(f"call-based tests are not JSON values ({exc})") from None


def row_to_problem(row: dict[str, Any], pid: str, num_samples: int = 1) -> Problem:
    io = json_field(row, "input_output", {}) or {}
    starter = str(row.get("starter_code") or "")
    function_name = _function_name(io, starter) if io.get("fn_name") else None
    from_gfg = str(row.get("source") or "").lower() == "geeksforgeeks"
    if function_name is None and (from_gfg or gfg.looks_like_assignments(io.get("inputs") or [])):
        function_name, tests = _gfg_tests(io, starter)
    else:
        tests = _tests(io, function_name)
    solutions = json_field(row, "solutions", []) or []
    reference = {"python": solutions[0]} if solutions and function_name is None else {}
    return Problem.from_row(
        {
            "id": pid,
            "title": str(row.get("name") or pid),
            "statement": str(row.get("question") or ""),
            "samples": tests[:num_samples],
            "tests": tests[num_samples:],
            "time_limit_s": _first_number(row.get("time_limit"), 2.0),
            "memory_mb": int(_first_number(row.get("memory_limit"), 256)),
            "reference": reference,
            "tier": str(row.get("difficulty") or ""),
            "tags": _tags(row.get("tags")),
            "function_name": function_name,
            "starter_code": starter,
            "judge": {} if function_name else judge_from_statement(str(row.get("question"))),
        }
    )


def _gfg_tests(io: dict[str, Any], starter: str) -> tuple[str, list[dict[str, str]]]:
    """A GeeksforGeeks row (`n = 5` inputs, a Solution method): function tests or Unsupported."""
    inputs, outputs = io.get("inputs") or [], io.get("outputs") or []
    if len(inputs) != len(outputs):
        raise Unsupported(f"input_output has {len(inputs)} inputs and {len(outputs)} outputs")
    name, cases = gfg.convert(starter, inputs, outputs)
    try:
        return name, [{"input": t.stdin, "output": t.expected or ""} for t in function_tests(cases)]
    except (TypeError, ValueError) as exc:
        raise Unsupported(f"GeeksforGeeks values are not plain values ({exc})") from None


def _tags(raw: Any) -> list[str]:
    if isinstance(raw, str):  # TACO publishes tags as the text of a Python list
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return []
    return [str(t) for t in raw] if isinstance(raw, list) else []


def _load(path: str, split: str, fmt: str, options: dict[str, Any]) -> list[Problem]:
    rows, already = read_rows(path, split)
    ids = {id(r): _row_id(r, i, fmt) for i, r in enumerate(rows)}
    num_samples = int(options.get("num_samples", 1))
    return convert(
        rows,
        lambda r: row_to_problem(r, ids[id(r)], num_samples),
        split=split,
        already_split=already,
        split_mode=options.get("split_mode", "hash"),
        skip_unsupported=bool(options.get("skip_unsupported", False)),
        row_id=lambda r: ids[id(r)],
        fmt=fmt,
    )


def _row_id(row: dict[str, Any], index: int, fmt: str) -> str:
    if row.get("problem_id") is not None:
        return f"{fmt}-{row['problem_id']}"
    return f"{fmt}-{row.get('name') or index}"


def load_taco(path: str, split: str, **options: Any) -> list[Problem]:
    return _load(path, split, "taco", options)


def load_apps(path: str, split: str, **options: Any) -> list[Problem]:
    return _load(path, split, "apps", options)
