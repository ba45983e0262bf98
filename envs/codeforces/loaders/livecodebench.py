"""livecodebench/code_generation_lite rows -> Problems.

Published fields used: question_id, question_title, question_content, platform, difficulty,
starter_code, public_test_cases (JSON text: [{"input", "output", "testtype"}]),
private_test_cases (the same JSON text, or that text pickled, zlib-compressed and base64-encoded
for the larger releases), metadata (JSON text; "func_name" for LeetCode rows).
testtype "stdin": stdin/stdout tests, compared as the statement says ("in any case": letters
case-insensitively; "absolute or relative error ... 10^{-6}": floats; loaders/statement_rules.py). testtype "functional": the input is one JSON value per
line (the positional arguments) and the output one JSON value; the answer is the method
Solution.<func_name> (LeetCode's convention), judged by sandbox.judging.functional.

The compressed form is unpickled with an unpickler that refuses every class and function, so a
tampered file cannot run code here: only plain str/list/dict data comes out.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from typing import Any

from envs.codeforces.loaders.rows import Unsupported, json_field, load_split
from envs.codeforces.loaders.statement_rules import judge_from_statement
from envs.codeforces.problems import Problem
from envs.errors import TaskError
from sandbox.judging.functional import function_tests


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: data only")


def decode_tests(raw: Any) -> list[dict[str, Any]]:
    """The test list from plain JSON text or the base64(zlib(pickle(json text))) form."""
    if isinstance(raw, list):
        return raw
    text = str(raw or "").strip()
    if not text:
        return []
    if text.startswith("["):
        return json.loads(text)
    try:
        blob = zlib.decompress(base64.b64decode(text))
        value = _DataOnly(io.BytesIO(blob)).load()
    except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as exc:
        raise TaskError(
            f"private_test_cases: neither JSON nor the compressed form ({exc})"
        ) from exc
    return json.loads(value) if isinstance(value, str | bytes) else value


def _convert_tests(cases: list[dict[str, Any]], function: bool) -> list[dict[str, str]]:
    kinds = {c.get("testtype", "stdin") for c in cases}
    if kinds - {"stdin", "functional"} or len(kinds) > 1:
        raise Unsupported(f"test types {sorted(kinds)} (one of stdin / functional expected)")
    if not function:
        return [{"input": c["input"], "output": c["output"]} for c in cases]
    rows = []
    for c in cases:
        try:
            args = [json.loads(line) for line in c["input"].splitlines() if line.strip()]
            rows.append({"args": args, "expected": json.loads(c["output"])})
        except json.JSONDecodeError as exc:
            raise Unsupported(f"functional test is not JSON ({exc.msg})") from None
    return [{"input": t.stdin, "output": t.expected or ""} for t in function_tests(rows)]


def row_to_problem(row: dict[str, Any]) -> Problem:
    pid = str(row.get("question_id") or "")
    public = decode_tests(row.get("public_test_cases"))
    private = decode_tests(row.get("private_test_cases"))
    function = any(c.get("testtype") == "functional" for c in public + private)
    metadata = json_field(row, "metadata", {}) or {}
    function_name = None
    if function:
        if not metadata.get("func_name"):
            raise Unsupported("functional tests but no metadata.func_name")
        function_name = f"Solution.{metadata['func_name']}"
    return Problem.from_row(
        {
            "id": pid,
            "title": str(row.get("question_title") or pid),
            "statement": str(row.get("question_content") or ""),
            "samples": _convert_tests(public, function),
            "tests": _convert_tests(private, function),
            "tier": str(row.get("difficulty") or ""),
            "tags": [str(row.get("platform") or "")],
            "function_name": function_name,
            "starter_code": str(row.get("starter_code") or ""),
            "judge": {} if function else judge_from_statement(str(row.get("question_content"))),
        }
    )


def load_livecodebench(
    path: str, split: str, *, skip_unsupported: bool = False, split_mode: str = "hash"
) -> list[Problem]:
    return load_split(
        path,
        split,
        row_to_problem,
        id_field="question_id",
        fmt="livecodebench",
        split_mode=split_mode,
        skip_unsupported=skip_unsupported,
    )
