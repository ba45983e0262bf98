"""Load problems in the public open-r1/codeforces schema (Parquet or JSONL) as `Problem`s.

Mapped fields: id, title, description + input_format + output_format (the statement), examples
(samples), official_tests (hidden tests), time_limit (s), memory_limit (MB), generated_checker.
Missing limits fall back to 2 s / 256 MB. A `generated_checker` follows open-r1's convention
(`python checker.py input correct_output solution_output`, accepted when it exits 0 and its last
stdout token is 1); it is wrapped into the sandbox's testlib-style contract (input, output,
answer; exit 0 = accept).

Rows we cannot judge are refused with the reason: interactive problems (interaction_format set),
input_mode other than "stdio" (the program would read/write files), and rows without
official_tests. With skip_unsupported=True they are skipped and counted in a log line instead.

Files: .parquet, .jsonl, .json (one object per line or one JSON array), gzipped .jsonl.gz.
Splits: a path containing "{split}" is formatted with the split name; otherwise rows are split
deterministically by id (crc32(id) % 10 == 0 goes to "test"); split_mode="all" gives every row
to both splits (an eval-only file).
"""

from __future__ import annotations

import logging
import zlib
from pathlib import Path
from typing import Any

from envs.codeforces.loaders.rows import SPLIT_MODES, read_file
from envs.codeforces.loaders.statement_rules import judge_from_statement
from envs.codeforces.problems import Problem
from envs.errors import TaskError

log = logging.getLogger(__name__)

# Runs an open-r1 generated checker under the sandbox's checker contract.
_WRAPPER = """import contextlib, io, sys
SOURCE = {source!r}
inp, out, ans = sys.argv[1:4]
sys.argv = ["checker.py", inp, ans, out]  # open-r1 order: input, correct output, solution output
buf, code = io.StringIO(), 0
with contextlib.redirect_stdout(buf):
    try:
        exec(compile(SOURCE, "checker.py", "exec"), {{"__name__": "__main__"}})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:
        code = 1
tokens = buf.getvalue().split()
try:
    accepted = code == 0 and bool(tokens) and float(tokens[-1]) == 1.0
except ValueError:
    accepted = False
sys.exit(0 if accepted else 1)
"""


def wrap_generated_checker(source: str) -> str:
    """A Python program with the sandbox's checker argv/exit contract around an open-r1 checker."""
    return _WRAPPER.format(source=source)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .parquet, .jsonl, .json (objects per line or one array), .jsonl.gz file."""
    return read_file(Path(path))


def unsupported_reason(row: dict[str, Any]) -> str | None:
    if row.get("interaction_format"):
        return "interactive problem (interaction_format is set); the judge runs stdin/stdout batches only"
    mode = row.get("input_mode") or "stdio"
    if mode != "stdio":
        return f"input_mode={mode!r}; only 'stdio' programs can be judged"
    if not row.get("official_tests"):
        return "no official_tests to judge on"
    return None


def _pairs(raw: Any, pid: str, name: str) -> list[dict[str, str]]:
    out = []
    for i, t in enumerate(raw or []):
        if (
            not isinstance(t, dict)
            or not isinstance(t.get("input"), str)
            or not isinstance(t.get("output"), str)
        ):
            raise TaskError(f"open-r1 row {pid!r}: {name}[{i}] needs string 'input' and 'output'")
        out.append({"input": t["input"], "output": t["output"]})
    return out


def row_to_problem(row: dict[str, Any]) -> Problem:
    pid = str(row.get("id") or "")
    if not pid:
        raise TaskError("open-r1 row without an 'id'")
    reason = unsupported_reason(row)
    if reason:
        raise TaskError(
            f"open-r1 row {pid!r} cannot be judged: {reason} "
            "(pass skip_unsupported=True to skip such rows)"
        )
    title = row.get("title") or pid
    sections = [f"# {title}", (row.get("description") or "").strip()]
    for heading, key in (("Input", "input_format"), ("Output", "output_format")):
        if row.get(key):
            sections.append(f"{heading}\n{row[key].strip()}")
    samples = _pairs(row.get("examples"), pid, "examples")
    sample_inputs = {s["input"] for s in samples}
    tests = [
        t
        for t in _pairs(row.get("official_tests"), pid, "official_tests")
        if t["input"] not in sample_inputs
    ]
    judge: dict[str, Any] = judge_from_statement("\n".join(sections))
    if row.get("generated_checker"):
        judge = {
            "mode": "checker",
            "checker": {
                "language": "python",
                "source": wrap_generated_checker(row["generated_checker"]),
            },
        }
    tags = list(row.get("tags") or [])
    if row.get("official_tests_complete") is False:
        tags.append("tests_incomplete")
    return Problem.from_row(
        {
            "id": pid,
            "title": title,
            "statement": "\n\n".join(s for s in sections if s) + "\n",
            "samples": samples,
            "tests": tests,
            "time_limit_s": row.get("time_limit") or 2.0,
            "memory_mb": int(row.get("memory_limit") or 256),
            "judge": judge,
            "reference": {},
            "tier": str(row.get("rating") or ""),
            "tags": tags,
        }
    )


def in_split(pid: str, split: str) -> bool:
    is_test = zlib.crc32(pid.encode()) % 10 == 0
    return is_test if split == "test" else not is_test


def load_openr1(
    path: str | Path,
    split: str | None = None,
    *,
    skip_unsupported: bool = False,
    split_mode: str = "hash",
) -> list[Problem]:
    """Problems of an open-r1/codeforces file; `split` selects by "{split}" in path or by id hash
    (split_mode="all": every row in both splits)."""
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split_mode={split_mode!r}; choose one of {SPLIT_MODES}")
    path_str = str(path)
    by_hash = split is not None and "{split}" not in path_str and split_mode == "hash"
    if split is not None and "{split}" in path_str:
        path_str = path_str.format(split=split)
    problems, skipped = [], 0
    for row in read_rows(path_str):
        if by_hash and split is not None and not in_split(str(row.get("id", "")), split):
            continue
        if skip_unsupported and unsupported_reason(row):
            skipped += 1
            continue
        problems.append(row_to_problem(row))
    if skipped:
        log.info(
            "open-r1 codeforces: skipped %d rows that cannot be judged (interactive, file I/O "
            "or no official tests)",
            skipped,
        )
    if not problems:
        raise TaskError(f"{path_str}: no usable problems for split {split!r}")
    return problems
