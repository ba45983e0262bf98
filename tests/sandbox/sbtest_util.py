"""Helpers shared by the sandbox tests (imported by conftest and test modules)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxUnavailable

ISOLATING_BACKENDS = ("docker", "bubblewrap", "namespaces")
_unavailable: dict[str, str] = {}


def _missing(name: str, reason: str) -> None:
    message = f"sandbox backend {name!r} unavailable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def make_sandbox(name: str, *, concurrency: int = 2, **options: object) -> Sandbox:
    """Sandbox.create(name), failing (CI) or skipping (elsewhere) when it cannot run here."""
    if name in _unavailable:
        _missing(name, _unavailable[name])
    try:
        return Sandbox.create(name, max_concurrency=concurrency, **options)  # type: ignore[arg-type]
    except SandboxUnavailable as exc:
        _unavailable[name] = str(exc)
        _missing(name, str(exc))
        raise


@contextlib.asynccontextmanager
async def checked_sandbox(name: str, **options: object) -> AsyncIterator[Sandbox]:
    """`make_sandbox(name, ...)`, closed on exit; then nothing of it may survive aclose()."""
    sb = make_sandbox(name, **options)  # type: ignore[arg-type]
    try:
        yield sb
    finally:
        await sb.aclose()
    backend = sb._backend
    assert processes_of_uids(set(backend.uids)) == []
    if name == "docker":
        assert labelled_containers(backend.owner) == []  # type: ignore[attr-defined]


def processes_of_uids(uids: set[int]) -> list[str]:
    """Host processes (in any pid namespace) whose real uid is one of `uids`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) in uids:
                found.append(f"{entry.name}: {status.splitlines()[0]}")
    return found


def labelled_containers(owner: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=gspo-sandbox.owner={owner}"],
        capture_output=True,
        text=True,
    )
    return out.stdout.split()
