"""Math task rows: the shipped problem set and loaders for user data (JSONL or Parquet).

Every loader returns rows {"id", "question", "answer"} where "answer" is the gold answer as
LaTeX text. Accepted input shapes, per row (a .jsonl line, a JSON array item, or a Parquet row):
- {"question" | "problem", "answer"}                     (answer may be a number)
- {"question", "answer": "...reasoning...\n#### 72"}     (GSM8K: the text after the last ####,
                                                           thousands separators removed)
- {"question" | "problem", "solution": "... \\boxed{42}"}   (the last \\boxed{} is the answer)
An optional "id" names the row in errors and reports (default FILESTEM-INDEX). Extra fields are
kept. A row with neither shape raises TaskError naming the file, row and fix. Whether math-verify
can read a gold answer is checked when Math-v0 loads a user file (MathEnv.check_gold_answers),
so a bad row fails at load time with its id, not mid-run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from envs.errors import MissingData, TaskError
from envs.math.boxed import extract_boxed

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "math"
SPLITS = ("train", "test")
_QUESTION_KEYS = ("question", "problem")


def builtin_tasks(split: str) -> list[dict[str, Any]]:
    """The shipped, generated problem set (envs/data/math/{train,test}.jsonl)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return load_math_file(DATA_DIR / f"{split}.jsonl")


def load_math_file(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl / .json (one object per line) or .parquet file, normalised."""
    path = Path(path)
    if not path.is_file():
        raise MissingData(f"math data file {str(path)!r} does not exist; fix the path")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        raw = _read_jsonl(path)
    elif suffix in (".parquet", ".pq"):
        raw = _read_parquet(path)
    else:
        raise ValueError(
            f"math data file {str(path)!r}: use a .jsonl or .parquet file, got {suffix!r}"
        )
    rows = [normalize_row(r, index=i, source=path) for i, r in enumerate(raw)]
    _check_unique_ids(rows, path)
    return rows


def normalize_row(
    raw: dict[str, Any], *, index: int, source: str | Path = "<rows>"
) -> dict[str, Any]:
    """One input row in any accepted shape -> {"id", "question", "answer", ...extras}."""
    where = f"{source} row {index}"
    if not isinstance(raw, dict):
        raise TaskError(f"{where}: expected an object, got {type(raw).__name__}")
    question = next((raw[k] for k in _QUESTION_KEYS if raw.get(k) not in (None, "")), None)
    if not isinstance(question, str):
        raise TaskError(f"{where}: needs a non-empty 'question' or 'problem' text field")
    answer = _gold_answer(raw, where)
    row = dict(raw)
    row.update(
        id=str(raw.get("id", f"{Path(str(source)).stem}-{index}")), question=question, answer=answer
    )
    return row


def _gold_answer(raw: dict[str, Any], where: str) -> str:
    answer = raw.get("answer")
    if isinstance(answer, bool):
        raise TaskError(
            f"{where}: 'answer' is a boolean ({answer}); give the answer as text or a number"
        )
    if isinstance(answer, (int, float)):
        return str(answer)
    if isinstance(answer, str) and "####" in answer:
        final = gsm8k_final_answer(answer)
        if not final:
            raise TaskError(
                f"{where}: nothing after '####' in 'answer'; put the final answer there"
            )
        return final
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    solution = raw.get("solution")
    if isinstance(solution, str):
        boxed = extract_boxed(solution)
        if boxed:
            return boxed
        raise TaskError(
            f"{where}: 'solution' has no \\boxed{{...}} answer; add one or an 'answer' field"
        )
    raise TaskError(f"{where}: needs an 'answer' field or a 'solution' containing \\boxed{{...}}")


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def gsm8k_final_answer(answer: str) -> str:
    """GSM8K's answer field: reasoning, then '#### 1,234' -> '1234'."""
    final = answer.rsplit("####", 1)[1].strip()
    return _THOUSANDS.sub("", final)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TaskError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg}); one object per line"
                ) from exc
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq  # only for Parquet users

    return pq.read_table(path).to_pylist()


def _check_unique_ids(rows: list[dict[str, Any]], path: Path) -> None:
    seen: set[str] = set()
    for row in rows:
        if row["id"] in seen:
            raise TaskError(f"{path}: duplicate id {row['id']!r}; ids must be unique within a file")
        seen.add(row["id"])
