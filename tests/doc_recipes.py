"""The code blocks of a Markdown page, as a user copies them: Python files by the module their
`register()` names, the pyproject.toml, and the shell commands (shared by tests/test_doc_recipes.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

FENCE = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)
ENTRY = re.compile(r'entry_point="([\w.]+):')


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
