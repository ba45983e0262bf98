"""deepmind/code_contests rows -> Problems.

Published fields used: name, description, public_tests / private_tests / generated_tests
({"input": [...], "output": [...]}), time_limit ({"seconds", "nanos"}), memory_limit_bytes,
solutions ({"language": [int], "solution": [str]}; 2 = C++, 3 = Python 3), cf_tags, cf_rating,
difficulty, input_file / output_file. Samples are public_tests; hidden tests are private_tests
plus generated_tests (include_generated=False drops the generated ones, which are many and
were produced by mutating inputs). Rows whose program must read or write a named file are
unsupported.
"""

from __future__ import annotations

from typing import Any

from envs.codeforces.loaders.rows import Unsupported, load_split
from envs.codeforces.loaders.statement_rules import judge_from_statement
from envs.codeforces.problems import Problem

LANGUAGE_IDS = {2: "cpp", 3: "python"}  # the dataset's Language enum (1 = Python 2, 4 = Java)


def _pairs(block: Any) -> list[dict[str, str]]:
    block = block or {}
    return [
        {"input": i, "output": o}
        for i, o in zip(block.get("input") or [], block.get("output") or [])
    ]


def _seconds(limit: Any) -> float:
    if isinstance(limit, dict):
        total = float(limit.get("seconds") or 0) + float(limit.get("nanos") or 0) / 1e9
        return total or 2.0
    return float(limit or 2.0)


def _reference(solutions: Any) -> dict[str, str]:
    solutions = solutions or {}
    out: dict[str, str] = {}
    for lang_id, source in zip(solutions.get("language") or [], solutions.get("solution") or []):
        language = LANGUAGE_IDS.get(int(lang_id))
        if language and language not in out:
            out[language] = source
    return out


def row_to_problem(row: dict[str, Any], include_generated: bool = True) -> Problem:
    if row.get("input_file") or row.get("output_file"):
        raise Unsupported("reads/writes named files (input_file/output_file)")
    samples = _pairs(row.get("public_tests"))
    hidden = _pairs(row.get("private_tests"))
    if include_generated:
        hidden += _pairs(row.get("generated_tests"))
    if not samples and not hidden:
        raise Unsupported("no tests")
    memory = int(row.get("memory_limit_bytes") or 0) >> 20
    return Problem.from_row(
        {
            "id": str(row["name"]),
            "title": str(row["name"]),
            "statement": str(row.get("description") or ""),
            "samples": samples,
            "tests": hidden,
            "time_limit_s": _seconds(row.get("time_limit")),
            "memory_mb": memory or 256,
            "reference": _reference(row.get("solutions")),
            "tier": str(row.get("cf_rating") or row.get("difficulty") or ""),
            "tags": list(row.get("cf_tags") or []),
            "judge": judge_from_statement(str(row.get("description") or "")),
        }
    )


def load_code_contests(
    path: str,
    split: str,
    *,
    include_generated: bool = True,
    skip_unsupported: bool = False,
    split_mode: str = "hash",
) -> list[Problem]:
    return load_split(
        path,
        split,
        lambda r: row_to_problem(r, include_generated),
        id_field="name",
        fmt="code_contests",
        split_mode=split_mode,
        skip_unsupported=skip_unsupported,
    )
