"""Problem-set loaders behind one interface: `load_source("FORMAT:PATH", split, **options)`.

Every loader is a function `load(path, split, **options) -> list[Problem]` that reads LOCAL
files only (nothing is fetched at run time) and returns validated `Problem`s, so Codeforces-v0
and the judge CLI never see a format's quirks. Formats:

    dir            our own layout (envs/codeforces/problems.py), split by splits.json
    kattis         Kattis / ICPC problem packages: one package or a directory of them
    code_contests  deepmind/code_contests rows
    taco           BAAI/TACO rows          apps   codeparrot/apps rows (same row format)
    livecodebench  livecodebench/code_generation_lite rows
    humaneval      openai/openai_humaneval rows      mbpp   mbpp rows (full or sanitized)
    openr1         open-r1/codeforces rows

Row files are JSONL, JSON, Parquet, Arrow, or a Hugging Face `datasets` save_to_disk directory
(see loaders/rows.py, which also documents how splits are chosen). Rows a format ships but we
cannot judge (interactive, file I/O, tests we cannot express) raise TaskError with the reason,
or with skip_unsupported=True are skipped and counted in one log line.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from envs.codeforces.problems import Problem
from envs.errors import TaskError

FORMATS: dict[str, str] = {
    "dir": "envs.codeforces.loaders.own",
    "kattis": "envs.codeforces.loaders.kattis",
    "code_contests": "envs.codeforces.loaders.code_contests",
    "taco": "envs.codeforces.loaders.taco_apps",
    "apps": "envs.codeforces.loaders.taco_apps",
    "livecodebench": "envs.codeforces.loaders.livecodebench",
    "humaneval": "envs.codeforces.loaders.humaneval_mbpp",
    "mbpp": "envs.codeforces.loaders.humaneval_mbpp",
    "openr1": "envs.codeforces.loaders.openr1",
}


class Loader(Protocol):
    def __call__(self, path: str, split: str, /, **options: Any) -> list[Problem]: ...


def parse_source(source: str) -> tuple[str, str]:
    """ "FORMAT:PATH" -> (format, path); a bad spelling names the formats."""
    fmt, sep, path = source.partition(":")
    if not sep or not path or fmt not in FORMATS:
        raise ValueError(
            f"source={source!r}: write FORMAT:PATH with FORMAT one of {sorted(FORMATS)}, "
            "e.g. source=kattis:/data/problems"
        )
    return fmt, path


def get_loader(fmt: str) -> Loader:
    if fmt not in FORMATS:
        raise ValueError(f"unknown problem format {fmt!r}; choose one of {sorted(FORMATS)}")
    module = importlib.import_module(FORMATS[fmt])
    loader: Loader = getattr(module, f"load_{fmt}")
    return loader


def load_source(source: str, split: str, **options: Any) -> list[Problem]:
    fmt, path = parse_source(source)
    problems = get_loader(fmt)(path, split, **options)
    if not problems:
        raise TaskError(f"{source}: no problems in split {split!r}")
    return problems


__all__ = ["FORMATS", "Loader", "get_loader", "load_source", "parse_source"]
