"""Read Kattis / ICPC problem packages (the problemtools layout) into judge-ready records.

One package is a directory:
    problem.yaml                name, limits (time_multiplier, time_limit, memory in MiB),
                                validation ("default" | "custom"), validator_flags
    .timelimit                  the time limit in seconds (written by problemtools / DOMjudge)
    domjudge-problem.ini        timelimit=... (DOMjudge's export)
    problem_statement/problem[.LANG].{md,tex}   the statement (statement/ in the 2023 spec)
    data/sample/*.in + .ans     sample tests; data/secret/**/*.in + .ans the hidden tests
    data/**/testdata.yaml       output_validator_flags per test group (output_validator_args,
                                or test_group.yaml, in 2023-07+): a group without them inherits
                                its nearest ancestor's (data/ included); they are appended to
                                problem.yaml's validator_flags, as problemtools does; samples
                                get data/sample's (or data/'s), never data/secret's
    output_validators/NAME/     a custom output validator (output_validator/ in the 2023 spec):
                                one Python file, one C++ source with headers, or a program
                                Kattis builds (build/run scripts, several C++ sources)
    submissions/<folder>/       see sandbox/judging/kattis_submissions.py
The time limit is the first of: the `time_limit` argument, .timelimit, domjudge-problem.ini,
problem.yaml limits.time_limit. A package with none of them (NWERC ships only time_multiplier)
has time_limit_s=None; `derive_time_limit` sets it from the accepted submissions' times the
way problemtools does (slowest accepted time x time_multiplier, here rounded up to whole seconds).

A custom validator runs natively under the Kattis protocol (`validator input answer feedback_dir
[flags] < output`, exit 42 accept / 43 reject, judgemessage.txt shown; see sandbox.core). A
one-file C++ validator's local `#include "x.h"` headers are inlined (each once) and it is compiled
once per process through the compile cache; a validator Kattis would build is built once in the
sandbox at load (sandbox/judging/kattis_build.py) and a failed build refuses the package.
Interactive problems (validation: custom interactive) are refused: the judge runs batch tests.
"""

from __future__ import annotations

import configparser
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sandbox.judging import kattis_build
from sandbox.judging.kattis_submissions import EXPECTED_VERDICTS, Submission, read_submissions
from sandbox.types import JudgeSpec, Program, TestCase

__all__ = ["EXPECTED_VERDICTS", "Package", "PackageError", "Submission", "load_package"]

CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++")
DEFAULT_TIME_MULTIPLIER = 5.0
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"\s*$', re.MULTILINE)


class PackageError(ValueError):
    """A directory that is not a usable problem package; the message names the file and fix."""


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
    judge: JudgeSpec  # the secret tests' (all tests' when they agree: see test_judges)
    submissions: tuple[Submission, ...]
    # One per test of `tests`: its group's validator flags applied (testdata.yaml), and the
    # test's name relative to data/ ("sample/1", "secret/g1/03").
    test_judges: tuple[JudgeSpec, ...] = ()
    test_names: tuple[str, ...] = ()

    @property
    def tests(self) -> tuple[TestCase, ...]:
        return self.samples + self.secret

    def judge_runs(self) -> list[tuple[JudgeSpec, list[int]]]:
        """Consecutive tests that share a judge: (judge, test indices), in test order."""
        runs: list[tuple[JudgeSpec, list[int]]] = []
        for index, judge in enumerate(self.test_judges or (self.judge,) * len(self.tests)):
            if runs and runs[-1][0] == judge:
                runs[-1][1].append(index)
            else:
                runs.append((judge, [index]))
        return runs


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


def load_package(
    path: str | Path, *, time_limit_s: float | None = None, backend: str = "auto"
) -> Package:
    """Read a package; a validator Kattis would build (build/run scripts, several C++ sources)
    is built now, in a sandbox of `backend` unless cached, and a failed build is a PackageError."""
    root = Path(path)
    if not is_package(root):
        raise PackageError(f"{root}: not a problem package (needs problem.yaml and data/)")
    meta = _yaml(root / "problem.yaml")
    limits = meta.get("limits") or {}
    validation = str(meta.get("validation", "default"))
    if "interactive" in validation.split():
        raise PackageError(f"{root}: validation={validation!r} (interactive) cannot be judged")
    samples, sample_flags, sample_names = _tests(root, "sample")
    secret, secret_flags, secret_names = _tests(root, "secret")
    if not samples and not secret:
        raise PackageError(f"{root}: no tests (data/sample/*.in and data/secret/*.in with .ans)")
    base = str(meta.get("validator_flags") or "").split()  # combined with each group's flags
    make = _judge_maker(root, validation, backend)
    judges = {f: make([*base, *f]) for f in {*sample_flags, *secret_flags, ()}}
    test_judges = tuple(judges[f] for f in (*sample_flags, *secret_flags))
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
        judge=judges[secret_flags[0] if secret_flags else (sample_flags or [()])[0]],
        submissions=read_submissions(root),
        test_judges=test_judges,
        test_names=(*sample_names, *secret_names),
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


def _group_flags(folder: Path, data: Path) -> tuple[str, ...]:
    """A group's output validator flags: set by its own testdata.yaml (test_group.yaml in
    2023-07+) or else by the nearest ancestor's, up to data/ (the spec's inheritance)."""
    while True:
        own = _own_flags(folder)
        if own is not None:
            return own
        if folder == data or data not in folder.parents:
            return ()
        folder = folder.parent


def _own_flags(folder: Path) -> tuple[str, ...] | None:
    for name in ("testdata.yaml", "test_group.yaml"):
        config = folder / name
        if not config.is_file():
            continue
        meta = _yaml(config)
        if "output_validator_args" in meta:  # 2023-07+: a sequence of strings
            raw = meta["output_validator_args"]
            return tuple(str(a) for a in raw) if isinstance(raw, list) else tuple(str(raw).split())
        if "output_validator_flags" in meta:
            return tuple(str(meta["output_validator_flags"] or "").split())
    return None


def _judge_maker(root: Path, validation: str, backend: str) -> Any:
    """flags -> JudgeSpec: the default validator with those flags, or the custom validator
    (built once) with them as arguments."""
    folder = next(
        (root / n for n in ("output_validators", "output_validator") if (root / n).exists()), None
    )
    if "custom" not in validation.split():
        return default_validator_spec
    if folder is None:
        raise PackageError(f"{root}: validation=custom but no output_validators/ directory")
    entries = sorted(folder.iterdir()) if folder.is_dir() else [folder]
    subdirs = [e for e in entries if e.is_dir()]
    source = subdirs[0] if len(subdirs) == 1 and folder.name == "output_validators" else folder
    checker = load_validator(source, backend)

    def make(flags: list[str]) -> JudgeSpec:
        return JudgeSpec(
            mode="checker", checker=checker, checker_protocol="kattis", checker_args=tuple(flags)
        )

    return make


def load_validator(source: Path, backend: str = "auto") -> Program:
    """The Program that runs a validator directory or file, built first if Kattis would."""
    if not kattis_build.needs_build(source):
        return validator_program(source)
    try:
        return kattis_build.build_sync(source, backend)
    except kattis_build.BuildError as exc:
        raise PackageError(
            f"{exc}; fix the validator's build (Kattis would reject it too)"
        ) from None


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


def _tests(root: Path, part: str) -> tuple[tuple[TestCase, ...], list[tuple[str, ...]], list[str]]:
    """(tests, each test's group flags, each test's name) of data/<part>, in natural order."""
    data = root / "data"
    folder = data / part
    if not folder.is_dir():
        return (), [], []
    tests, flags, names = [], [], []
    cache: dict[Path, tuple[str, ...]] = {}
    for inp in sorted(folder.rglob("*.in"), key=lambda p: _natural(str(p.relative_to(folder)))):
        answer = inp.with_suffix(".ans")
        if not answer.is_file():
            raise PackageError(f"{inp}: no answer file {answer.name} next to it")
        tests.append(TestCase(inp.read_text(), answer.read_text()))
        if inp.parent not in cache:
            cache[inp.parent] = _group_flags(inp.parent, data)
        flags.append(cache[inp.parent])
        names.append(str(inp.relative_to(data).with_suffix("")))
    return tuple(tests), flags, names
