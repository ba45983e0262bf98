"""Kattis / ICPC problem packages -> Problems (the package reader is sandbox/judging/kattis.py).

`load_kattis(PATH, split)`: PATH is one package or a directory of packages. The split's
packages are PATH/<split>/ when that directory exists (train/ and test/), or PATH with "{split}"
formatted; otherwise packages are split by a hash of their name (rows.in_split) unless
split_mode="all".
The default output validator's flags become judge options (case-insensitive unless
case_sensitive, space_change_sensitive, float tolerances); a custom output validator runs under
the Kattis protocol (built first when Kattis would build it). A package whose test groups
use different flags is refused (a Problem has one judge). A package without a time limit (only time_multiplier) gets
`default_time_limit_s` and a warning: run `python -m sandbox verify PATH --write-timelimit` once
to derive it from the accepted submissions and store it in .timelimit.
"""

from __future__ import annotations

import logging
from pathlib import Path

from envs.codeforces.loaders.rows import SPLIT_MODES, in_split
from envs.codeforces.problems import Problem
from envs.errors import TaskError
from sandbox.judging.kattis import Package, PackageError, find_packages, load_package

log = logging.getLogger("envs.codeforces.loaders")


def package_to_problem(package: Package, default_time_limit_s: float = 2.0) -> Problem:
    if len(set(package.test_judges)) > 1:  # a Problem has one judge for all its tests
        raise PackageError(
            f"{package.path}: its test groups use different validator flags (testdata.yaml); "
            "a training problem has one judge for every test. `python -m sandbox verify` and "
            "`python -m sandbox judge --tests PKG` judge it group by group"
        )
    judge = package.judge
    checker = None
    if judge.checker is not None:
        checker = {"language": judge.checker.language, "source": judge.checker.source}
    reference = {}
    for sub in package.submissions:
        if sub.category == "accepted" and sub.program and sub.program.language not in reference:
            reference[sub.program.language] = sub.program.source
    return Problem.from_row(
        {
            "id": package.name,
            "title": package.title,
            "statement": package.statement or f"# {package.title}\n",
            "samples": [{"input": t.stdin, "output": t.expected or ""} for t in package.samples],
            "tests": [{"input": t.stdin, "output": t.expected or ""} for t in package.secret],
            "time_limit_s": package.time_limit_s or default_time_limit_s,
            "memory_mb": package.memory_mb,
            "judge": {
                "mode": judge.mode,
                "abs_tol": judge.abs_tol,
                "rel_tol": judge.rel_tol,
                "checker": checker,
                "checker_protocol": judge.checker_protocol,
                "checker_args": list(judge.checker_args),
                "case_sensitive": judge.case_sensitive,
                "space_change_sensitive": judge.space_change_sensitive,
            },
            "reference": reference,
        }
    )


def load_kattis(
    path: str,
    split: str,
    *,
    split_mode: str = "hash",
    default_time_limit_s: float = 2.0,
    skip_unsupported: bool = False,
) -> list[Problem]:
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split_mode={split_mode!r}; choose one of {SPLIT_MODES}")
    by_path = "{split}" in path
    root = Path(path.format(split=split) if by_path else path)
    if not by_path and (root / split).is_dir() and not (root / "problem.yaml").exists():
        root, by_path = root / split, True  # PATH/train and PATH/test hold the packages
    try:
        found = find_packages(root)
    except PackageError as exc:
        raise TaskError(str(exc)) from exc
    if not by_path and split_mode == "hash" and len(found) > 1:
        found = [p for p in found if in_split(p.name, split)]
    problems, skipped = [], []
    for package_dir in found:
        try:
            package = load_package(package_dir)
            problem = package_to_problem(package, default_time_limit_s)
        except PackageError as exc:
            if not skip_unsupported:
                raise TaskError(f"{exc} (pass skip_unsupported=True to skip it)") from exc
            skipped.append(str(exc))
            continue
        if package.time_limit_s is None:
            log.warning(
                "%s: no time limit (.timelimit, domjudge-problem.ini or limits.time_limit); "
                "using %.1f s. `python -m sandbox verify %s --write-timelimit` derives one",
                package_dir, default_time_limit_s, package_dir,
            )  # fmt: skip
        problems.append(problem)
    if skipped:
        log.warning("kattis: skipped %d packages: %s", len(skipped), skipped[:3])
    return problems
