"""Helpers of the session tests: a pool per backend (failing under CI=true when it cannot start)
and the leftover checks every session test ends with."""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import AsyncIterator

import pytest
from sbtest_util import processes_of_uids

from sandbox import SandboxUnavailable, SessionPool

SESSION_BACKENDS = ("docker", "bubblewrap")
_unavailable: dict[str, str] = {}


def _missing(name: str, reason: str) -> None:
    message = f"session backend {name!r} unavailable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


async def started_pool(name: str, **options: object) -> SessionPool:
    """A started SessionPool on `name`; fail (CI) or skip (elsewhere) when it cannot run here."""
    if name in _unavailable:
        _missing(name, _unavailable[name])
    pool = SessionPool(name, **options)  # type: ignore[arg-type]
    try:
        await pool.start()
    except SandboxUnavailable as exc:
        _unavailable[name] = str(exc)
        _missing(name, str(exc))
    return pool


def session_containers(owner: str) -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-aq",
            "--filter",
            f"label=gspo-sandbox.owner={owner}",
            "--filter",
            "label=gspo-sandbox.kind=session",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.split()


def session_cgroups(owner_pid: int) -> list[str]:
    """The session cgroups (sandbox/isolation/cgroups.py) that process `owner_pid` made."""
    pattern = f"gspo-sandbox/{owner_pid}.*.gspo-ses-*"  # pid.instance.name
    return glob.glob(f"/sys/fs/cgroup/*/{pattern}") + glob.glob(f"/sys/fs/cgroup/{pattern}")


def leftovers(pool: SessionPool, owner: str | None = None) -> list[str]:
    """Processes of the pool's uids, (docker) containers of its owner, and session cgroups
    of this process, still there."""
    found = processes_of_uids(set(pool._uids)) + session_cgroups(os.getpid())
    if pool.backend_name == "docker":
        backend = pool._backend
        found += session_containers(owner or backend.owner)  # type: ignore[union-attr]
    return found


# Fixtures: test modules import them (`from session_util import pool, session_backend`).
@pytest.fixture(params=SESSION_BACKENDS)
def session_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def pool(session_backend: str) -> AsyncIterator[SessionPool]:
    """A SessionPool on each session backend; after the test nothing of it may survive."""
    p = await started_pool(session_backend, max_sessions=4)
    try:
        yield p
    finally:
        await p.aclose()
    assert leftovers(p) == []
