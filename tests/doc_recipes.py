"""The code blocks of a Markdown page, as a user copies them: Python files by the module their
`register()` names, the pyproject.toml, the shell commands (shared by tests/test_doc_recipes.py),
and one README Python example run as written (tests/test_api.py, tests/test_reward_functions.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

FENCE = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)
ENTRY = re.compile(r'entry_point="([\w.]+):')
ROOT = Path(__file__).resolve().parents[1]


def blocks(page: Path, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(page.read_text()) if kind == lang]


def package_files(page: Path) -> dict[str, str]:
    """Relative path -> text of every Python block that registers an env, and pyproject.toml."""
    files: dict[str, str] = {}
    for body in blocks(page, "python"):
        match = ENTRY.search(body)
        if match:
            module = match.group(1)
            files[module.replace(".", "/") + ".py"] = body
            files[module.split(".")[0] + "/__init__.py"] = ""
    for body in blocks(page, "toml"):
        files["pyproject.toml"] = body
    return files


def commands(page: Path, prefix: str) -> list[list[str]]:
    """Every command of the page's bash blocks that starts with `prefix`, as argv."""
    found = []
    for body in blocks(page, "bash"):
        for line in body.replace("\\\n", " ").splitlines():
            if line.strip().startswith(prefix):
                found.append(shlex.split(line.split(" #")[0]))
    return found


def readme_python_block(needle: str, *, without: str | None = None) -> str:
    """The one Python block of README.md that contains `needle` (and not `without`)."""
    [example] = [
        body
        for body in blocks(ROOT / "README.md", "python")
        if needle in body and (without is None or without not in body)
    ]
    return example


def run_python_example(code: str, cwd: Path, *, timeout_s: float) -> subprocess.CompletedProcess:
    """`python -c code` in `cwd` with this checkout importable, as a user runs a copied example;
    it must exit 0 (the assertion shows the end of its stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def metrics_rows(run_dir: Path) -> list[dict]:
    """The rows of a run's metrics.jsonl."""
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
