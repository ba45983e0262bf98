"""Read Kattis / ICPC problem packages (the problemtools layout) into judge-ready records.

One package is a directory:
    problem.yaml                name, limits (time_multiplier, time_limit, memory in MiB),
                                validation ("default" | "custom"), validator_flags
    .timelimit                  the time limit in seconds (written by problemtools / DOMjudge)
    domjudge-problem.ini        timelimit=... (DOMjudge's export)
    problem_statement/problem[.LANG].{md,tex}   the statement (statement/ in the 2023 spec)
    data/sample/*.in + .ans     sample tests; data/secret/**/*.in + .ans the hidden tests
    data[/secret]/testdata.yaml output_validator_flags
    output_validators/NAME/     a custom output validator (output_validator/ in the 2023 spec):
                                C++ sources with local headers, or one Python file
    submissions/<verdict>/      accepted, wrong_answer, time_limit_exceeded, run_time_error,
                                memory_limit_exceeded, output_limit_exceeded, rejected
The time limit is the first of: the `time_limit` argument, .timelimit, domjudge-problem.ini,
problem.yaml limits.time_limit. A package with none of them (NWERC ships only time_multiplier)
has time_limit_s=None; `derive_time_limit` sets it from the accepted submissions' times the
way problemtools does (slowest accepted time x time_multiplier, here rounded up to whole seconds).

A custom validator runs natively under the Kattis protocol (`validator input answer feedback_dir
[flags] < output`, exit 42 accept / 43 reject; see sandbox.core). Our runner compiles one C++
translation unit, so local `#include "x.h"` headers are inlined (each once) and several .cpp
files are joined; the result is compiled once per process through the compile cache.
Interactive problems (validation: custom interactive) are refused: the judge runs batch tests.
"""

from __future__ import annotations

import configparser
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sandbox.types import JudgeSpec, Program, TestCase, Verdict

CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++")
SOURCE_LANGUAGE = {".py": "python", **{s: "cpp" for s in CPP_SUFFIXES}}
EXPECTED_VERDICTS: dict[str, tuple[Verdict, ...]] = {
    "accepted": (Verdict.OK,),
    "wrong_answer": (Verdict.WA,),
    "time_limit_exceeded": (Verdict.TLE,),
    "run_time_error": (Verdict.RE, Verdict.MLE),
    "memory_limit_exceeded": (Verdict.MLE, Verdict.RE),
    "output_limit_exceeded": (Verdict.OLE,),
    "rejected": (Verdict.WA, Verdict.TLE, Verdict.RE, Verdict.MLE, Verdict.OLE, Verdict.CE),
}
DEFAULT_TIME_MULTIPLIER = 5.0
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"\s*$', re.MULTILINE)


class PackageError(ValueError):
    """A directory that is not a usable problem package; the message names the file and fix."""


@dataclass(frozen=True, slots=True)
class Submission:
    path: Path
    category: str  # the submissions/ subdirectory: accepted, wrong_answer, ...
    program: Program | None  # None: a language we do not run (skip_reason says which)
    skip_reason: str = ""

    @property
    def expected(self) -> tuple[Verdict, ...]:
        return EXPECTED_VERDICTS[self.category]


@dataclass(frozen=True, slots=True)
class Package:
    path: Path
    name: str  # the directory name (the problem's short name)
    title: str
    statement: str
    samples: tuple[TestCase, ...]
    secret: tuple[TestCase, ...]
    time_limit_s: float | None
    time_multiplier: float
    memory_mb: int
    judge: JudgeSpec
    submissions: tuple[Submission, ...]

    @property
    def tests(self) -> tuple[TestCase, ...]:
        return self.samples + self.secret


def is_package(path: Path) -> bool:
    return path.is_dir() and (path / "problem.yaml").is_file() and (path / "data").is_dir()


def find_packages(path: str | Path) -> list[Path]:
    """`path` itself when it is a package, else its package subdirectories (sorted)."""
    root = Path(path)
    if not root.is_dir():
        raise PackageError(f"{root}: no such directory (expected a Kattis problem package)")
    if is_package(root):
        return [root]
    found = sorted(d for d in root.iterdir() if is_package(d))
    if not found:
        raise PackageError(
            f"{root}: neither a problem package nor a directory of them "
            "(a package has problem.yaml and data/)"
        )
    return found


def load_package(path: str | Path, *, time_limit_s: float | None = None) -> Package:
    root = Path(path)
    if not is_package(root):
        raise PackageError(f"{root}: not a problem package (needs problem.yaml and data/)")
    meta = _yaml(root / "problem.yaml")
    limits = meta.get("limits") or {}
    validation = str(meta.get("validation", "default"))
    if "interactive" in validation.split():
        raise PackageError(f"{root}: validation={validation!r} (interactive) cannot be judged")
    flags = _validator_flags(root, meta)
    samples = _tests(root / "data" / "sample")
    secret = _tests(root / "data" / "secret")
    if not samples and not secret:
        raise PackageError(f"{root}: no tests (data/sample/*.in and data/secret/*.in with .ans)")
    return Package(
        path=root,
        name=root.name,
        title=_title(meta, root),
        statement=_statement(root),
        samples=samples,
        secret=secret,
        time_limit_s=time_limit_s or _time_limit(root, limits),
        time_multiplier=float(limits.get("time_multiplier", DEFAULT_TIME_MULTIPLIER)),
        memory_mb=int(limits.get("memory", 2048)),
        judge=_judge(root, validation, flags),
        submissions=_submissions(root),
    )


def derive_time_limit(package: Package, slowest_accepted_s: float) -> Package:
    """The slowest accepted time x time_multiplier (the problemtools rule), rounded up to a
    whole second: sub-second limits would measure process start-up more than the program."""
    limit = float(max(1, math.ceil(slowest_accepted_s * package.time_multiplier)))
    return replace(package, time_limit_s=limit)


def default_validator_spec(flags: list[str]) -> JudgeSpec:
    """The Kattis default output validator: case-insensitive tokens unless flags say otherwise."""
    options: dict[str, Any] = {"case_sensitive": False}
    abs_tol = rel_tol = 0.0
    floats = False
    tolerance_flags: list[str] = []
    it = iter(flags)
    for flag in it:
        if flag == "case_sensitive":
            options["case_sensitive"] = True
        elif flag == "space_change_sensitive":
            options["space_change_sensitive"] = True
        elif flag in ("float_tolerance", "float_absolute_tolerance", "float_relative_tolerance"):
            value = _float_flag(flag, next(it, None))
            _check_tolerance_flag(flag, tolerance_flags)
            floats = True
            if flag != "float_relative_tolerance":
                abs_tol = value
            if flag != "float_absolute_tolerance":
                rel_tol = value
        else:
            raise PackageError(
                f"unknown default-validator flag {flag!r}; known: case_sensitive, "
                "space_change_sensitive, float_tolerance, float_absolute_tolerance, "
                "float_relative_tolerance"
            )
    if floats:  # a tolerance the flags do not set is off, as in Kattis
        return JudgeSpec(mode="float", abs_tol=abs_tol, rel_tol=rel_tol, **options)
    return JudgeSpec(mode="tokens", **options)


def _check_tolerance_flag(flag: str, seen: list[str]) -> None:
    """The spec: each tolerance at most once, and float_tolerance not beside the others."""
    if flag in seen or (seen and "float_tolerance" in (flag, *seen)):
        raise PackageError(
            f"validator flags give {flag} after {', '.join(seen)}: each tolerance may be given "
            "once, and float_tolerance not together with float_absolute/relative_tolerance"
        )
    seen.append(flag)


def validator_program(directory: Path) -> Program:
    """One Program from a validator directory (or file): C++ with local headers inlined."""
    files = [directory] if directory.is_file() else sorted(directory.rglob("*"))
    cpp = [f for f in files if f.suffix.lower() in CPP_SUFFIXES]
    if cpp:
        seen: set[Path] = set()
        units = [_inline_headers(f, seen) for f in cpp]
        return Program("cpp", "\n".join(units))
    python = [f for f in files if f.suffix == ".py"]
    if len(python) == 1:
        return Program("python", python[0].read_text())
    raise PackageError(
        f"{directory}: a validator must be C++ sources (with headers) or exactly one .py file; "
        f"found {[f.name for f in files if f.is_file()]}"
    )


# ---- internals -------------------------------------------------------------------------------
def _yaml(path: Path) -> dict[str, Any]:
    import yaml  # PyYAML, a Hydra dependency

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise PackageError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise PackageError(f"{path}: expected a mapping at the top level")
    return data


def _title(meta: dict[str, Any], root: Path) -> str:
    name = meta.get("name")
    if isinstance(name, dict):  # {"en": "...", "de": "..."}
        name = name.get("en") or next(iter(name.values()), None)
    return str(name or root.name)


def _statement(root: Path) -> str:
    for folder in ("problem_statement", "statement"):
        for stem in ("problem.en", "problem"):
            for suffix in (".md", ".tex"):
                path = root / folder / (stem + suffix)
                if path.is_file():
                    return path.read_text()
    return ""


def _time_limit(root: Path, limits: dict[str, Any]) -> float | None:
    timelimit = root / ".timelimit"
    if timelimit.is_file():
        return _positive_float(timelimit.read_text().strip(), timelimit)
    ini = root / "domjudge-problem.ini"
    if ini.is_file():
        parser = configparser.ConfigParser()
        parser.read_string("[problem]\n" + ini.read_text())
        value = parser["problem"].get("timelimit")
        if value is not None:
            return _positive_float(value.strip().strip("'\""), ini)
    if "time_limit" in limits:
        return _positive_float(limits["time_limit"], root / "problem.yaml")
    return None


def _positive_float(value: Any, where: Path) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PackageError(f"{where}: time limit {value!r} is not a number") from None
    if not number > 0:
        raise PackageError(f"{where}: time limit {value!r} must be positive")
    return number


def _float_flag(flag: str, value: str | None) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise PackageError(
            f"validator flag {flag} needs a number after it, got {value!r}"
        ) from None
    if not number >= 0:
        raise PackageError(f"validator flag {flag} {value}: must be >= 0")
    return number


def _validator_flags(root: Path, meta: dict[str, Any]) -> list[str]:
    flags = str(meta.get("validator_flags") or "").split()
    for testdata in (root / "data" / "testdata.yaml", root / "data" / "secret" / "testdata.yaml"):
        if testdata.is_file():
            extra = _yaml(testdata).get("output_validator_flags")
            if extra:
                flags = str(extra).split()  # the most specific file wins
    return flags


def _judge(root: Path, validation: str, flags: list[str]) -> JudgeSpec:
    folder = next(
        (root / n for n in ("output_validators", "output_validator") if (root / n).exists()), None
    )
    if "custom" not in validation.split() or folder is None:
        if "custom" in validation.split():
            raise PackageError(f"{root}: validation=custom but no output_validators/ directory")
        return default_validator_spec(flags)
    entries = sorted(folder.iterdir()) if folder.is_dir() else [folder]
    subdirs = [e for e in entries if e.is_dir()]
    source = subdirs[0] if len(subdirs) == 1 and folder.name == "output_validators" else folder
    return JudgeSpec(
        mode="checker",
        checker=validator_program(source),
        checker_protocol="kattis",
        checker_args=tuple(flags),
    )


def _inline_headers(path: Path, seen: set[Path]) -> str:
    """The file's text with each local `#include "x"` replaced by x's text (once per file)."""

    def expand(match: re.Match[str]) -> str:
        header = (path.parent / match.group(1)).resolve()
        if not header.is_file():
            return match.group(0)  # a system header spelled with quotes: leave it to g++
        if header in seen:
            return f"// {match.group(1)} (already included)"
        seen.add(header)
        return _inline_headers(header, seen)

    seen.add(path.resolve())
    return _INCLUDE.sub(expand, path.read_text())


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _tests(folder: Path) -> tuple[TestCase, ...]:
    if not folder.is_dir():
        return ()
    out = []
    for inp in sorted(folder.rglob("*.in"), key=lambda p: _natural(str(p.relative_to(folder)))):
        answer = inp.with_suffix(".ans")
        if not answer.is_file():
            raise PackageError(f"{inp}: no answer file {answer.name} next to it")
        out.append(TestCase(inp.read_text(), answer.read_text()))
    return tuple(out)


def _submissions(root: Path) -> tuple[Submission, ...]:
    folder = root / "submissions"
    if not folder.is_dir():
        return ()
    found = []
    for category in sorted(d for d in folder.iterdir() if d.is_dir()):
        if category.name not in EXPECTED_VERDICTS:
            continue
        for path in sorted(category.iterdir()):
            language = SOURCE_LANGUAGE.get(path.suffix.lower())
            if path.is_file() and language:
                program = Program(language, path.read_text())  # type: ignore[arg-type]
                found.append(Submission(path, category.name, program))
            else:
                why = "a multi-file submission" if path.is_dir() else f"language {path.suffix!r}"
                found.append(Submission(path, category.name, None, f"skipped: {why}"))
    return tuple(found)
