"""The SWE fixtures' git repository, built deterministically from repos/minicalc.

`build(dest)` makes a git repo whose commits have fixed authors and dates, so their hashes are
the same on every machine: `main` is the clean package; branch `bug-<name>` adds one bug on top
(SWE-bench's base_commit is that buggy commit) and a\ncommit `fix-<name>` that fixes it again (R2E-Gym's commit_hash). The JSONL fixtures name these hashes; run this
file to print them after changing the fixture repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "repos" / "minicalc"
# name -> (file, buggy text, fixed text)
BUGS = {
    "clamp": (
        "minicalc/ops.py",
        "    if x < lo:\n        return hi\n",
        "    if x < lo:\n        return lo\n",
    ),
    "mean": ("minicalc/ops.py", "return sum(xs) / (len(xs) + 1)", "return sum(xs) / len(xs)"),
    "running": ("minicalc/ops.py", "out.append(x)", "out.append(total)"),
}
_ENV = {
    "GIT_AUTHOR_NAME": "fixture",
    "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
    "GIT_COMMITTER_NAME": "fixture",
    "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, **_ENV)
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


def build(dest: Path) -> dict[str, str]:
    """The repo at `dest`; returns {"main": hash, "bug-<name>": hash, ...}."""
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "minicalc")
    commits = {"main": _git(dest, "rev-parse", "HEAD")}
    for name, (path, buggy, fixed) in BUGS.items():
        _git(dest, "checkout", "-q", "-b", f"bug-{name}", "main")
        text = (dest / path).read_text()
        assert text.count(fixed) == 1, name
        (dest / path).write_text(text.replace(fixed, buggy))
        _git(dest, "commit", "-q", "-am", f"bug {name}")
        commits[f"bug-{name}"] = _git(dest, "rev-parse", "HEAD")
        (dest / path).write_text(text)  # R2E-Gym names the fixing commit; its parent is buggy
        _git(dest, "commit", "-q", "-am", f"fix {name}")
        commits[f"fix-{name}"] = _git(dest, "rev-parse", "HEAD")
    _git(dest, "checkout", "-q", "main")
    return commits


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for key, value in build(Path(tmp) / "repo").items():
            print(key, value)
