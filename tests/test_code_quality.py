"""The CI quality gates STYLE.md promises: ruff lint, ruff format and mypy over the repository.

Each gate runs the real tool (installed by the dev extra, versions pinned in pyproject.toml so a
new release cannot turn CI red on its own) with the configuration in pyproject.toml, and a failure
shows the tool's own report. Fix a failure with `ruff check --fix .`, `ruff format .` or by fixing
the type error mypy names; a deliberate exception is a narrow `# type: ignore[code]  # why`.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_tool(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run `python -m <tool> ...` from the repository root with this interpreter's packages."""
    try:
        return subprocess.run(
            [sys.executable, "-m", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`{' '.join(args)}` took over {timeout_s} s: {exc}")


def assert_clean(proc: subprocess.CompletedProcess, fix: str) -> None:
    if proc.returncode == 0:
        return
    if "No module named" in proc.stderr:
        pytest.fail(f"{proc.stderr.strip()}; install the dev tools: pip install -e '.[dev]'")
    report = (proc.stdout + proc.stderr).strip()
    pytest.fail(f"{report}\n\nfix: {fix}", pytrace=False)


def test_ruff_lint_is_clean():
    proc = run_tool("ruff", "check", "--output-format", "concise", ".")
    assert_clean(proc, "`ruff check --fix .`, then fix what remains by hand")


def test_ruff_format_is_clean():
    proc = run_tool("ruff", "format", "--check", "--output-format", "concise", ".")
    assert_clean(proc, "`ruff format .` (or `ruff format <file>` for the files listed above)")


@pytest.mark.slow  # ~120 s on a cold cache under load; ruff stays in the fast tier
def test_mypy_is_clean():
    # The checked packages and per-module settings live in [tool.mypy]; a cold cache takes
    # ~15-30 s on 2 cores, a warm one (.mypy_cache) ~2 s.
    proc = run_tool("mypy", timeout_s=300)
    assert_clean(proc, "fix the type errors above, or a narrow `# type: ignore[code]  # why`")
