"""Build the shipped SWE task set from real projects' source distributions (SWE-smith style).

    pip download --no-binary :all: --no-deps inflection==0.5.1 ... -d SDIST_DIR
    python -m envs.swe.make_set SDIST_DIR [--per-project 25]

For each project in PROJECTS: its sdist is copied, unmodified, to envs/swe/data/repos/
NAME-VERSION.tar.gz; the kept files (package source, its own tests, licence; a src/ layout is
flattened: the rows' repo_files) are unpacked from it on use (envs/swe/archives.py). Then candidate bugs from
mutate.py are tried one at a time on the host: the project's test files for that module run
before (pristine) and after the mutation through the same pytest runner the grader uses. A
candidate is kept when at least one and at most 80% of the tests that passed now fail
(FAIL_TO_PASS); PASS_TO_PASS is a seeded
sample (at most 60) of the tests that pass both times. Rows use the SWE-smith layout (`patch`
introduces the bug) plus repo_path, repo_files and test_files, written to envs/swe/data/instances.jsonl.
The issue text describes the symptom as a user would (the function, what goes wrong, the error
line pytest showed), never a test id or the patch. Run `python -m envs.swe validate` on the
result: that is the gold validation in the sandbox.
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.swe.archives import trimmed, unpack
from envs.swe.grading import parse_records
from envs.swe.mutate import Mutation, mutations
from envs.swe.repo import pytest_bundle
from envs.swe.runners import RUNNERS, Runner

DATA = Path(__file__).with_name("data")


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    licence: str
    keep: tuple[str, ...]  # globs of kept files, relative to the sdist root (after flattening)
    targets: dict[str, tuple[str, ...]]  # mutated module -> its test files
    runner: str = "pytest"  # envs/swe/runners.py RUNNERS key
    repo: str = ""  # owner/name (default name/name)
    trim: bool = False  # ship a .tar.xz of the kept files, not the whole sdist (too big)

    @property
    def full_repo(self) -> str:
        return self.repo or f"{self.name}/{self.name}"


DJANGO_UTILS = ("text", "dateparse", "http", "html", "datastructures", "ipv6", "numberformat")
# the fast ones (a few seconds beside sympy's import): generate, primetest, residue take 2-3x
SYMPY_NTHEORY = {"factor_": "test_factor_", "digits": "test_digits"}
# what `import sympy` imports (measured), plus sympy.testing (its test helpers)
SYMPY_PACKAGES = (
    "algebras assumptions calculus combinatorics concrete core discrete external functions geometry "
    "integrals "
    "interactive logic matrices multipledispatch ntheory parsing plotting polys printing series "
    "sets simplify solvers strategies tensor testing utilities"
).split()


PROJECTS = (
    Project(
        "inflection",
        "0.5.1",
        "MIT",
        ("inflection/*.py", "test_inflection.py", "LICENSE"),
        {"inflection/__init__.py": ("test_inflection.py",)},
    ),
    Project(
        "parse",
        "1.22.4",
        "MIT",
        ("parse/__init__.py", "tests/*.py", "LICENSE"),
        {
            "parse/__init__.py": (
                "tests/test_parse.py",
                "tests/test_bugs.py",
                "tests/test_parsetype.py",
                "tests/test_pattern.py",
            )
        },
    ),
    Project(
        "toolz",
        "1.2.0",
        "BSD-3-Clause",
        (
            "toolz/*.py",
            "toolz/curried/*.py",
            "toolz/sandbox/*.py",
            "toolz/tests/*.py",
            "tlz/*.py",
            "LICENSE.txt",
        ),
        {
            "toolz/itertoolz.py": ("toolz/tests/test_itertoolz.py",),
            "toolz/dicttoolz.py": ("toolz/tests/test_dicttoolz.py",),
            "toolz/functoolz.py": ("toolz/tests/test_functoolz.py",),
            "toolz/recipes.py": ("toolz/tests/test_recipes.py",),
        },
    ),
    Project(
        "isodate",
        "0.7.2",
        "BSD-3-Clause",
        ("isodate/*.py", "tests/*.py", "LICENSE"),
        {
            "isodate/isodates.py": ("tests/test_date.py",),
            "isodate/isotime.py": ("tests/test_time.py",),
            "isodate/isoduration.py": ("tests/test_duration.py",),
            "isodate/duration.py": ("tests/test_duration.py",),
            "isodate/isodatetime.py": ("tests/test_datetime.py",),
            "isodate/isostrf.py": ("tests/test_strf.py",),
        },
    ),
    Project(
        "boltons",
        "26.2.0",
        "BSD-3-Clause",
        (
            "boltons/__init__.py",
            "boltons/typeutils.py",
            "boltons/strutils.py",
            "boltons/iterutils.py",
            "boltons/mathutils.py",
            "boltons/listutils.py",
            "boltons/setutils.py",
            "boltons/queueutils.py",
            "boltons/dictutils.py",
            "tests/__init__.py",
            "tests/conftest.py",
            "tests/test_strutils.py",
            "tests/test_iterutils.py",
            "tests/test_mathutils.py",
            "tests/test_listutils.py",
            "tests/test_setutils.py",
            "tests/test_queueutils.py",
            "tests/test_dictutils.py",
            "LICENSE",
        ),
        {
            "boltons/strutils.py": ("tests/test_strutils.py",),
            "boltons/iterutils.py": ("tests/test_iterutils.py",),
            "boltons/mathutils.py": ("tests/test_mathutils.py",),
            "boltons/listutils.py": ("tests/test_listutils.py",),
            "boltons/setutils.py": ("tests/test_setutils.py",),
            "boltons/dictutils.py": ("tests/test_dictutils.py",),
            "boltons/queueutils.py": ("tests/test_queueutils.py",),
        },
    ),
    Project(
        "django",
        "5.2.8",
        "BSD-3-Clause",
        (
            "django/**/*.py",
            "django/conf/locale/en/LC_MESSAGES/*",
            "!django/contrib/gis/**/*.py",
            "LICENSE",
            "tests/*.py",
            "tests/utils_tests/__init__.py",
            "tests/utils_tests/models.py",
            *(f"tests/utils_tests/test_{m}.py" for m in DJANGO_UTILS),
        ),
        {f"django/utils/{m}.py": (f"tests/utils_tests/test_{m}.py",) for m in DJANGO_UTILS},
        runner="django",
        repo="django/django",
        trim=True,
    ),
    Project(
        "sympy",
        "1.14.0",
        "BSD-3-Clause",
        (
            "sympy/*.py",
            *(f"sympy/{d}/**/*.py" for d in SYMPY_PACKAGES),
            "!sympy/**/tests/*.py",
            "!sympy/**/benchmarks/*.py",
            "sympy/testing/tests/__init__.py",
            "sympy/utilities/tests/__init__.py",
            "sympy/utilities/tests/test_iterables.py",
            "sympy/ntheory/tests/__init__.py",
            *(f"sympy/ntheory/tests/{t}.py" for t in SYMPY_NTHEORY.values()),
            "LICENSE",
        ),
        {
            "sympy/utilities/iterables.py": ("sympy/utilities/tests/test_iterables.py",),
            **{
                f"sympy/ntheory/{m}.py": (f"sympy/ntheory/tests/{t}.py",)
                for m, t in SYMPY_NTHEORY.items()
            },
        },
        runner="sympy",
        repo="sympy/sympy",
        trim=True,
    ),
)


def archive_of(project: Project) -> Path:
    suffix = ".tar.xz" if project.trim else ".tar.gz"
    return DATA / "repos" / f"{project.name}-{project.version}{suffix}"


def prepare(project: Project, sdists: Path | None) -> Path:
    """The project's kept files, unpacked from its sdist (copied from `sdists` into
    envs/swe/data/repos/ first, when given)."""
    if sdists is not None:
        archive = sdists / f"{project.name}-{project.version}.tar.gz"
        if not archive.is_file():
            raise FileNotFoundError(
                f"{archive} is missing: pip download --no-binary :all: --no-deps "
                f"{project.name}=={project.version} -d {sdists}"
            )
        if project.trim:
            trimmed(archive, project.keep, archive_of(project))
        else:
            shutil.copyfile(archive, archive_of(project))
    return unpack(archive_of(project), repo_files(project))


def repo_files(project: Project) -> tuple[str, ...]:
    return () if project.trim else project.keep


def run_host(tree: Path, files: tuple[str, ...], runner: str = "pytest") -> tuple[dict, str]:
    """The runner on the host (trusted inputs only: a real project, our own mutation)."""
    nonce = secrets.token_hex(8)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "nonce").write_text(nonce)
        try:
            out = _run_runner(tree, files, tmp, RUNNERS[runner])
        except subprocess.TimeoutExpired:  # a mutation that loops forever: not a usable bug
            return {}, "timed out"
        log = (Path(tmp) / "log").read_text(errors="replace")
    statuses, tampered, _ = parse_records(out.stdout, nonce)
    return ({} if statuses is None or tampered else statuses), log


def _run_runner(
    tree: Path, files: tuple[str, ...], tmp: str, spec: Runner
) -> subprocess.CompletedProcess[str]:
    (Path(tmp) / "runner.py").write_text(spec.script())
    (Path(tmp) / "changed").write_text("")  # our own mutation: no untrusted file
    deps = pytest_bundle()
    if spec.guarded:
        deps = Path(tmp) / "deps"
        deps.mkdir()
        for wheel in spec.wheels():
            shutil.copyfile(wheel, deps / wheel.name)
    head = [f"{tmp}/nonce", str(deps), f"{tmp}/log", f"{tmp}/changed"]
    return subprocess.run(
        [sys.executable, "-I", "-B", f"{tmp}/runner.py", *head, *spec.args(list(files))],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        # as in the sandbox: no plugins from the host's site-packages
        env={"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )


def bug_patch(path: str, before: str, after: str) -> str:
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{path}",
        f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(diff)


def issue_text(project: Project, module: str, mutation: Mutation, log: str) -> str:
    what = f"`{mutation.function}()`" if mutation.function else f"the `{module}` module"
    error = next(
        (m.strip()[1:].strip() for m in log.splitlines() if m.startswith("E ") and m[1:].strip()),
        "",
    )
    error = re.sub(r"\s+", " ", error)[:200]
    if "test" in error.lower() or "::" in error:  # never quote the tests themselves
        error = ""
    lines = [
        f"{what} in {project.name} {project.version} behaves incorrectly",
        "",
        f"Since a recent change, code that uses {what} from `{module}` gives wrong results.",
    ]
    if error:
        lines += ["", "When I exercise it I see:", "", f"    {error}"]
    lines += ["", "It worked before; the documented behaviour should be restored."]
    return "\n".join(lines)


def build(
    sdists: Path | None,
    per_project: int,
    seed: int,
    out: Path,
    workers: int = 3,
    only: list[str] | None = None,
    start: int = 0,
    modules: list[str] | None = None,
) -> int:
    """Screen every project's targets; each new kept row is appended to `out` at once.

    sdists=None reuses the archives already under data/repos. A candidate whose patch is already a
    row of `out` is skipped, so a re-run (another seed, new targets) adds only new bugs.
    """
    count = start
    seen = {json.loads(x)["patch"] for x in out.read_text().splitlines()} if out.exists() else set()
    for project in PROJECTS:
        if only and project.name not in only:
            continue
        tree = prepare(project, sdists)
        quota = -(-per_project // len(project.targets))
        for module, files in project.targets.items():
            if modules and module not in modules:
                continue
            for item in screen(project, tree, module, files, seed, quota, workers, seen):
                new = row(project, count, *item)
                seen.add(new["patch"])
                with out.open("a") as fh:
                    fh.write(json.dumps(new) + "\n")
                count += 1
            print(f"{project.name}: {module}: {count} rows so far", flush=True)
    return count


def screen(
    project, tree, module, files, seed, quota, workers, seen=frozenset()
) -> Iterator[tuple[Any, ...]]:
    """Try candidates `workers` at a time (each on its own copy of the tree) until `quota`."""
    from concurrent.futures import ThreadPoolExecutor

    source = (tree / module).read_text()
    order = {"flip_compare": 0, "drop_branch": 1, "flip_binop": 2, "swap_operands": 3}
    fresh = [
        m
        for m in mutations(source, seed=seed, limit=10**6)
        if bug_patch(module, source, m.apply(source)) not in seen
    ][: 6 * quota]
    candidates = sorted(fresh, key=lambda m: order.get(m.kind, 4))
    copies = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(workers):
            copies.append(Path(tmp) / str(i))
            shutil.copytree(tree, copies[-1])
        # outside this repository: pytest must not take its rootdir from our pyproject.toml
        baseline, _ = run_host(copies[0], files, project.runner)
        passing = sorted(t for t, s in baseline.items() if s == "PASSED" and _usable(project, t))

        def attempt(args):
            copy, mutation = args
            (copy / module).write_text(mutation.apply(source))
            try:
                return mutation, run_host(copy, files, project.runner)
            finally:
                (copy / module).write_text(source)

        found: list[tuple[Any, ...]] = []
        with ThreadPoolExecutor(workers) as pool:
            for start in range(0, len(candidates), workers):
                batch = list(zip(copies, candidates[start : start + workers], strict=False))
                for mutation, (statuses, log) in pool.map(attempt, batch):
                    f2p = [t for t in passing if statuses.get(t) != "PASSED"]
                    print(
                        f"  {module}: {mutation.kind} line {mutation.lineno}: "
                        f"{len(f2p)}/{len(passing)} caught",
                        flush=True,
                    )
                    f2p = [t for t in passing if statuses.get(t) != "PASSED"]
                    # caught, but not everything broken (an import error is not a bug to fix)
                    if 1 <= len(f2p) <= 0.8 * len(passing) and len(found) < quota:
                        p2p = [t for t in passing if statuses.get(t) == "PASSED"]
                        p2p = sorted(random.Random(seed).sample(p2p, min(60, len(p2p))))
                        found.append((module, files, mutation, source, f2p, p2p, log))
                        yield found[-1]
                if len(found) >= quota:
                    break


def _usable(project: Project, test_id: str) -> bool:
    """Django: only `test_x (module.Class.test_x)` ids (a docstring line is also recorded as an
    id, as SWE-bench's parser reads it, but it is not unique)."""
    return project.runner != "django" or re.fullmatch(r"\S+ \(\S+\)", test_id) is not None


def row(project, index, module, files, mutation, source, f2p, p2p, log) -> dict:
    return {
        "instance_id": f"{project.name}__{project.name}-{project.version}.{mutation.kind}__{index}",
        "repo": project.full_repo,
        "patch": bug_patch(module, source, mutation.apply(source)),
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "problem_statement": issue_text(project, module, mutation, log),
        "repo_path": f"repos/{archive_of(project).name}",
        **({"repo_files": list(project.keep)} if not project.trim else {}),
        "test_files": list(files),
        "license": project.licence,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m envs.swe.make_set")
    parser.add_argument("--only", nargs="*", help="project names (default: all)")
    parser.add_argument("--append", action="store_true", help="add to instances.jsonl")
    parser.add_argument("--modules", nargs="*", help="only these target modules (default: all)")
    parser.add_argument("--workers", type=int, default=3, help="candidates screened at once")
    parser.add_argument(
        "sdists", type=Path, nargs="?", help="sdist folder (default: the archives in data/repos)"
    )
    parser.add_argument("--per-project", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = DATA / "instances.jsonl"
    if not args.append:
        out.unlink(missing_ok=True)
    start = len(out.read_text().splitlines()) if out.exists() else 0
    count = build(
        args.sdists,
        args.per_project,
        args.seed,
        out,
        workers=args.workers,
        only=args.only,
        start=start,
        modules=args.modules,
    )
    print(f"wrote {count} instances to {out}")


if __name__ == "__main__":
    main()
