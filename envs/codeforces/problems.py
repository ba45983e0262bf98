"""Codeforces-style problems: the record, the on-disk layout, and the task rows the env consumes.

On disk, one directory per problem (envs/data/codeforces/<id>/):
    problem.json   id, title, tier, time_limit_s, memory_mb, judge, tags, tests_origin
    statement.md   legend + Input + Output sections (samples are appended from tests.jsonl)
    tests.jsonl    {"input", "output", "sample"} per line; samples first
    ref.py, ref.cpp   reference solutions
    checker.py     only for judge mode "checker" (argv: input, output, answer; exit 0 = accept)
A problem set root holds those directories plus splits.json ({"train": [ids], "test": [ids]}).

Task rows are plain JSON-friendly dicts (what load_tasks returns and reset(options={"task": row})
receives); Problem.from_row validates one and names the field at fault. Loading never runs a
generator: tests are committed data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envs.errors import TaskError
from sandbox.types import Language

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "codeforces"
JudgeMode = Literal["tokens", "lines", "float", "checker"]
JUDGE_MODES = ("tokens", "lines", "float", "checker")
LANGUAGES = ("python", "cpp")


@dataclass(frozen=True, slots=True)
class Test:
    input: str
    output: str


@dataclass(frozen=True, slots=True)
class Judge:
    mode: JudgeMode = "tokens"
    abs_tol: float = 1e-6
    rel_tol: float = 1e-6
    checker_language: Language = "python"
    checker_source: str | None = None
    checker_protocol: str = "testlib"  # or "kattis" (argv input answer feedback_dir, exit 42/43)
    checker_args: tuple[str, ...] = ()
    case_sensitive: bool = True
    space_change_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class Problem:
    id: str
    title: str
    statement: str
    samples: tuple[Test, ...]
    tests: tuple[Test, ...]  # hidden tests; the judge runs samples + tests
    time_limit_s: float = 2.0
    memory_mb: int = 256
    judge: Judge = field(default_factory=Judge)
    reference: dict[str, str] = field(default_factory=dict)  # language -> source
    tier: str = ""
    tags: tuple[str, ...] = ()
    # Function-style problems (HumanEval, MBPP, LeetCode-style rows): the answer is a Python
    # function of this name ("f" or "Class.method"); tests are sandbox.judging.functional rows.
    function_name: str | None = None
    starter_code: str = ""

    @property
    def all_tests(self) -> tuple[Test, ...]:
        # Samples first: the first failing test then tells whether a sample failed (feedback).
        return self.samples + self.tests

    def to_row(self) -> dict[str, Any]:
        checker = None
        if self.judge.checker_source is not None:
            checker = {"language": self.judge.checker_language, "source": self.judge.checker_source}
        return {
            "id": self.id,
            "title": self.title,
            "statement": self.statement,
            "samples": [{"input": t.input, "output": t.output} for t in self.samples],
            "tests": [{"input": t.input, "output": t.output} for t in self.tests],
            "time_limit_s": self.time_limit_s,
            "memory_mb": self.memory_mb,
            "judge": {
                "mode": self.judge.mode,
                "abs_tol": self.judge.abs_tol,
                "rel_tol": self.judge.rel_tol,
                "checker": checker,
                "checker_protocol": self.judge.checker_protocol,
                "checker_args": list(self.judge.checker_args),
                "case_sensitive": self.judge.case_sensitive,
                "space_change_sensitive": self.judge.space_change_sensitive,
            },
            "reference": dict(self.reference),
            "tier": self.tier,
            "tags": list(self.tags),
            "function_name": self.function_name,
            "starter_code": self.starter_code,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Problem:
        if not isinstance(row, dict):
            raise TaskError(f"a codeforces task row must be a dict, got {type(row).__name__}")
        pid = str(_field(row, "id", "?"))
        samples = _tests(row.get("samples", []), pid, "samples")
        tests = _tests(_field(row, "tests", pid), pid, "tests")
        if not samples and not tests:
            raise TaskError(f"task {pid!r}: no tests at all; give 'tests' (hidden) and 'samples'")
        time_s = _positive(row.get("time_limit_s", 2.0), pid, "time_limit_s", float)
        memory = _positive(row.get("memory_mb", 256), pid, "memory_mb", int)
        return cls(
            id=pid,
            title=str(row.get("title", pid)),
            statement=str(_field(row, "statement", pid)),
            samples=samples,
            tests=tests,
            time_limit_s=time_s,
            memory_mb=memory,
            judge=_judge(row.get("judge") or {}, pid),
            reference=dict(row.get("reference") or {}),
            tier=str(row.get("tier", "")),
            tags=tuple(row.get("tags") or ()),
            function_name=row.get("function_name") or None,
            starter_code=str(row.get("starter_code") or ""),
        )


def _field(row: dict[str, Any], name: str, pid: str) -> Any:
    if name not in row or row[name] is None:
        raise TaskError(f"task {pid!r}: missing field {name!r} (see envs/codeforces/problems.py)")
    return row[name]


def _positive(value: Any, pid: str, name: str, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise TaskError(f"task {pid!r}: {name}={value!r} is not a number") from None
    if number <= 0:
        raise TaskError(f"task {pid!r}: {name}={value!r} must be positive")
    return number


def _tests(raw: Any, pid: str, name: str) -> tuple[Test, ...]:
    if not isinstance(raw, list | tuple):
        raise TaskError(f"task {pid!r}: {name!r} must be a list of {{'input', 'output'}} dicts")
    out = []
    for i, t in enumerate(raw):
        if (
            not isinstance(t, dict)
            or not isinstance(t.get("input"), str)
            or not isinstance(t.get("output"), str)
        ):
            raise TaskError(f"task {pid!r}: {name}[{i}] needs string fields 'input' and 'output'")
        out.append(Test(t["input"], t["output"]))
    return tuple(out)


def _judge(raw: dict[str, Any], pid: str) -> Judge:
    mode = raw.get("mode", "tokens")
    if mode not in JUDGE_MODES:
        raise TaskError(f"task {pid!r}: judge.mode={mode!r}; expected one of {JUDGE_MODES}")
    checker = raw.get("checker")
    if mode == "checker" and not (isinstance(checker, dict) and checker.get("source")):
        raise TaskError(
            f"task {pid!r}: judge.mode='checker' needs judge.checker={{'language', 'source'}}"
        )
    language = (checker or {}).get("language", "python")
    if checker and language not in LANGUAGES:
        raise TaskError(
            f"task {pid!r}: judge.checker.language={language!r}; expected one of {LANGUAGES}"
        )
    protocol = raw.get("checker_protocol", "testlib")
    if protocol not in ("testlib", "kattis"):
        raise TaskError(
            f"task {pid!r}: judge.checker_protocol={protocol!r}; expected 'testlib' or 'kattis'"
        )
    return Judge(
        mode=mode,
        abs_tol=float(raw.get("abs_tol", 1e-6)),
        rel_tol=float(raw.get("rel_tol", 1e-6)),
        checker_language=language,
        checker_source=(checker or {}).get("source"),
        checker_protocol=protocol,
        checker_args=tuple(str(a) for a in raw.get("checker_args") or ()),
        case_sensitive=bool(raw.get("case_sensitive", True)),
        space_change_sensitive=bool(raw.get("space_change_sensitive", False)),
    )


# -- the directory layout -------------------------------------------------------------------------
def load_problem_dir(path: str | Path) -> Problem:
    """Read one problem directory (layout in the module docstring)."""
    path = Path(path)
    meta_path = path / "problem.json"
    if not meta_path.is_file():
        raise TaskError(f"{path}: not a problem directory (no problem.json)")
    meta = json.loads(meta_path.read_text())
    pid = str(meta.get("id", path.name))
    samples: list[Test] = []
    tests: list[Test] = []
    for n, line in enumerate((path / "tests.jsonl").read_text().splitlines(), 1):
        if line.strip():
            t = json.loads(line)
            if not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
                raise TaskError(f"{path / 'tests.jsonl'}:{n}: needs string 'input' and 'output'")
            (samples if t.get("sample") else tests).append(Test(t["input"], t["output"]))
    judge = dict(meta.get("judge") or {"mode": "tokens"})
    if judge.get("mode") == "checker":
        checker_file = path / judge.pop("checker_file", "checker.py")
        if not checker_file.is_file():
            raise TaskError(f"{path}: judge mode 'checker' but {checker_file.name} is missing")
        language = "cpp" if checker_file.suffix == ".cpp" else "python"
        judge["checker"] = {"language": language, "source": checker_file.read_text()}
    reference = {
        lang: (path / f"ref.{ext}").read_text()
        for lang, ext in (("python", "py"), ("cpp", "cpp"))
        if (path / f"ref.{ext}").is_file()
    }
    row = {
        "id": pid,
        "title": meta.get("title", pid),
        "statement": (path / "statement.md").read_text(),
        "samples": [{"input": t.input, "output": t.output} for t in samples],
        "tests": [{"input": t.input, "output": t.output} for t in tests],
        "time_limit_s": meta.get("time_limit_s", 2.0),
        "memory_mb": meta.get("memory_mb", 256),
        "judge": judge,
        "reference": reference,
        "tier": meta.get("tier", ""),
        "tags": meta.get("tags", []),
    }
    return Problem.from_row(row)


def load_problemset(root: str | Path = SHIPPED_DIR) -> list[Problem]:
    """Every problem directory under root, sorted by id."""
    root = Path(root)
    if not root.is_dir():
        raise TaskError(f"problem directory {root} does not exist")
    problems = [
        load_problem_dir(d) for d in sorted(root.iterdir()) if (d / "problem.json").is_file()
    ]
    if not problems:
        raise TaskError(f"{root}: no problem directories (each needs a problem.json)")
    return problems


def load_split(split: str, root: str | Path = SHIPPED_DIR) -> list[Problem]:
    """The problems of a split as listed in root/splits.json (a committed, deterministic split)."""
    root = Path(root)
    splits_path = root / "splits.json"
    if not splits_path.is_file():
        raise TaskError(f"{root}: no splits.json; write {{'train': [ids], 'test': [ids]}} there")
    splits = json.loads(splits_path.read_text())
    if split not in splits:
        raise TaskError(f"unknown split {split!r}; {splits_path} has {sorted(splits)}")
    by_id = {p.id: p for p in load_problemset(root)}
    missing = [i for i in splits[split] if i not in by_id]
    if missing:
        raise TaskError(f"{splits_path}: split {split!r} names unknown problems {missing}")
    return [by_id[i] for i in splits[split]]
