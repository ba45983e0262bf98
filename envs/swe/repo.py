"""Host-side repository work for SWE instances: the start tree, patches, and the pytest bundle.

Everything here runs on the trainer's host with trusted inputs (the instance file), never on what
an agent wrote: the grader builds the tree it tests from these, then overlays only the agent's
versions of the repository's own non-test source files (see grading.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePosixPath

from envs.swe.instances import Instance

__all__ = ["apply_patch", "is_test_path", "materialize", "pytest_bundle", "source_files"]

# What the pytest run inside the sandbox imports: pytest 8/9 and its pure-Python dependencies,
# copied from the host's own installation (no network; the sandbox image has no pytest).
_BUNDLE_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
_SKIP_DIRS = {".git", "__pycache__", ".tox", ".nox", ".eggs", "build", "dist", ".pytest_cache"}


class PatchError(ValueError):
    """A patch of the instance file does not apply to its repository (the data is broken)."""


def is_test_path(path: str) -> bool:
    """SWE-bench's notion of a test file: under a test(s)/testing directory, a test_*.py /
    *_test.py / *_tests.py file, or conftest.py. The grader never takes these from the agent."""
    p = PurePosixPath(path)
    if any(part in ("test", "tests", "testing") for part in p.parts[:-1]):
        return True
    name = p.name
    return (
        name == "conftest.py"
        or name.startswith("test_")
        or name.endswith(("_test.py", "_tests.py"))
    )


def materialize(inst: Instance, dest: Path, *, with_tests: bool = False) -> Path:
    """Write the instance's start state (repository + bug_patch) under `dest`; with_tests also
    applies test_patch (the grader's tree). Returns `dest`."""
    if not inst.repo_path:
        raise ValueError(
            f"instance {inst.instance_id!r} has no repo_path; it needs its image ({inst.image})"
        )
    src = Path(inst.repo_path)
    dest.mkdir(parents=True, exist_ok=True)
    if (src / ".git").exists() and inst.base_commit:
        _git_export(src, inst.base_commit, dest)
    else:
        _copy_tree(src, dest)
    if inst.bug_patch:
        apply_patch(dest, inst.bug_patch, what=f"{inst.instance_id}: bug patch")
    if with_tests and inst.test_patch:
        apply_patch(dest, inst.test_patch, what=f"{inst.instance_id}: test_patch")
    return dest


def source_files(tree: Path) -> list[str]:
    """The repository's own non-test Python files (relative POSIX paths), sorted."""
    out = []
    for path in tree.rglob("*.py"):
        rel = path.relative_to(tree).as_posix()
        if not (set(PurePosixPath(rel).parts) & _SKIP_DIRS) and not is_test_path(rel):
            out.append(rel)
    return sorted(out)


def apply_patch(tree: Path, patch: str, *, what: str = "patch", reverse: bool = False) -> None:
    if not patch.strip():
        return
    argv = ["git", "apply", "--whitespace=nowarn", "-p1"] + (["-R"] if reverse else [])
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as fh:
        fh.write(patch if patch.endswith("\n") else patch + "\n")
    try:
        run = subprocess.run(
            [*argv, fh.name], cwd=tree, capture_output=True, text=True, check=False
        )
    finally:
        Path(fh.name).unlink(missing_ok=True)
    if run.returncode != 0:
        raise PatchError(f"{what} does not apply: {run.stderr.strip()[:500]}")


def _git_export(src: Path, commit: str, dest: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(src), "archive", "--format=tar", commit],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise ValueError(
            f"repo_path {src}: commit {commit} cannot be exported: "
            f"{archive.stderr.decode(errors='replace').strip()[:300]}"
        )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)


def _copy_tree(src: Path, dest: Path) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if set(rel.parts) & _SKIP_DIRS or path.is_symlink():
            continue
        target = dest / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def pytest_bundle() -> Path:
    """A directory holding pytest and its dependencies, built once per host installation (cached
    by the versions' content hash under ~/.cache/gspo-agents)."""
    sources = []
    for name in _BUNDLE_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(
                f"SWE grading needs {name!r} on the host (pip install pytest) to bundle into "
                "the sandbox"
            )
        origin = Path(spec.origin)
        sources.append(origin.parent if origin.name == "__init__.py" else origin)
    key = hashlib.sha256(
        "|".join(f"{p}:{p.stat().st_mtime_ns}" for p in sources).encode()
    ).hexdigest()[:16]
    dest = Path.home() / ".cache" / "gspo-agents" / f"swe-pytest-{key}"
    if dest.is_dir():
        return dest
    tmp = Path(
        tempfile.mkdtemp(prefix="swe-pytest-", dir=dest.parent if dest.parent.is_dir() else None)
    )
    for src in sources:
        if src.is_dir():
            shutil.copytree(src, tmp / src.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(src, tmp / src.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(dest)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
