"""Reading rows of a published dataset from local files, and choosing a split.

Accepted paths: a .jsonl / .json (one object per line, or one JSON array; either may be gzipped:
.jsonl.gz, .json.gz), .parquet or .arrow file, or a directory written by `datasets.Dataset[Dict].save_to_disk`. A path containing
"{split}" is formatted with the split name ("data/{split}.jsonl"); a saved DatasetDict gives the
split of that name. Otherwise the rows are split deterministically by id: crc32(id) % 10 == 0
goes to "test", the rest to "train"; split_mode="all" gives every row to both splits (for an
eval-only set such as HumanEval).
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from envs.codeforces.problems import Problem
from envs.errors import TaskError

log = logging.getLogger("envs.codeforces.loaders")
SPLIT_MODES = ("hash", "all")


def read_rows(path: str, split: str) -> tuple[list[dict[str, Any]], bool]:
    """(rows, already_split): already_split is True when the path or a DatasetDict chose it."""
    if "{split}" in path:
        return read_file(Path(path.format(split=split)), None), True
    target = Path(path)
    if target.is_dir() and (target / "dataset_dict.json").is_file():
        return read_file(target, split), True
    return read_file(target, None), False


def read_file(path: Path, split: str | None = None) -> list[dict[str, Any]]:
    """The rows of one file or save_to_disk directory (a DatasetDict needs `split`)."""
    if path.is_dir():
        return _read_saved(path, split)
    if not path.is_file():
        raise TaskError(f"{path}: no such file or directory")
    suffix = path.suffix.lower()
    if suffix == ".gz" and path.suffixes[-2:-1] in ([".jsonl"], [".json"]):
        return _read_json(path, gzip.decompress(path.read_bytes()).decode("utf-8"))
    if suffix in (".jsonl", ".json"):
        return _read_json(path, path.read_text(encoding="utf-8"))
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".arrow":
        import datasets

        return datasets.Dataset.from_file(str(path)).to_list()
    raise TaskError(
        f"{path}: read .jsonl, .json (or either gzipped, .jsonl.gz), .parquet, .arrow or a "
        "datasets save_to_disk directory"
    )


def _read_saved(path: Path, split: str | None) -> list[dict[str, Any]]:
    import datasets

    try:
        saved = datasets.load_from_disk(str(path))
    except FileNotFoundError as exc:
        raise TaskError(f"{path}: not a datasets save_to_disk directory ({exc})") from exc
    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise TaskError(f"{path}: no split {split!r}; the saved dataset has {list(saved)}")
        saved = saved[split]
    return saved.to_list()


def _read_json(path: Path, text: str) -> list[dict[str, Any]]:
    if text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise TaskError(f"{path}:{number}: not JSON ({exc.msg})") from exc
    if not all(isinstance(r, dict) for r in rows):
        raise TaskError(f"{path}: every row must be a JSON object")
    return rows


def in_split(key: str, split: str) -> bool:
    is_test = zlib.crc32(key.encode()) % 10 == 0
    return is_test if split == "test" else not is_test


def convert(
    rows: Iterable[dict[str, Any]],
    to_problem: Callable[[dict[str, Any]], Problem],
    *,
    split: str,
    already_split: bool,
    split_mode: str,
    skip_unsupported: bool,
    row_id: Callable[[dict[str, Any]], str],
    fmt: str,
) -> list[Problem]:
    """Select the split, map each row, and skip (counted) or raise on rows we cannot judge."""
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split_mode={split_mode!r}; choose one of {SPLIT_MODES}")
    problems, skipped = [], []
    for row in rows:
        key = row_id(row)
        if not already_split and split_mode == "hash" and not in_split(key, split):
            continue
        try:
            problems.append(to_problem(row))
        except Unsupported as exc:
            if not skip_unsupported:
                raise TaskError(
                    f"{fmt} row {key!r} cannot be judged: {exc} "
                    "(pass skip_unsupported=True to skip such rows)"
                ) from None
            skipped.append(f"{key}: {exc}")
    if skipped:
        log.warning(
            "%s: skipped %d rows that cannot be judged, e.g. %s", fmt, len(skipped), skipped[:3]
        )
    return problems


def load_split(
    path: str,
    split: str,
    to_problem: Callable[[dict[str, Any]], Problem],
    *,
    id_field: str,
    fmt: str,
    split_mode: str = "hash",
    skip_unsupported: bool = False,
) -> list[Problem]:
    """`read_rows` then `convert`, for a format whose rows carry their id in `id_field`."""
    rows, already = read_rows(path, split)
    return convert(
        rows,
        to_problem,
        split=split,
        already_split=already,
        split_mode=split_mode,
        skip_unsupported=skip_unsupported,
        row_id=lambda r: str(r.get(id_field, "")),
        fmt=fmt,
    )


class Unsupported(Exception):
    """A row in the published format that this judge cannot run (the message says why)."""


def json_field(row: dict[str, Any], name: str, default: Any = None) -> Any:
    """Fields published as JSON text (TACO/APPS input_output, LiveCodeBench tests) or as data."""
    value = row.get(name)
    if isinstance(value, str):
        if not value.strip():
            return default
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise TaskError(f"field {name!r} is not valid JSON ({exc.msg})") from exc
    return default if value is None else value


def as_text(value: Any) -> str:
    """A test's input/output as published: a string, or a list of lines."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value) + "\n"
    return str(value)
