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
# and docker sessions started from a published-style SWE image (`image=`, /testbed writable)
HOSTILE_SESSION_BACKENDS = (*SESSION_BACKENDS, "docker+image")
_unavailable: dict[str, str] = {}
_images: list[str] = []


def _missing(name: str, reason: str) -> None:
    message = f"session backend {name!r} unavailable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def published_test_image() -> str:
    """A published-style image (a small /testbed, a python env) built once per test process
    from the sandbox base, removed at exit (tests/envs/swe_image_util.py)."""
    if not _images:
        import atexit
        import secrets
        import tempfile
        from pathlib import Path

        from tests.envs.swe_image_util import published_image, remove_images

        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "pkg").mkdir()
            Path(tmp, "pkg", "mod.py").write_text("VALUE = 1\n")
            tag = published_image(Path(tmp), f"gspo-test-published:{secrets.token_hex(4)}")
        _images.append(tag)

        def remove() -> None:
            from sandbox.sessions.images import _prepared

            remove_images(*[p.tag for p in _prepared.values() if p.source == tag], tag)

        atexit.register(remove)
    return _images[0]


async def started_pool(name: str, **options: object) -> SessionPool:
    """A started SessionPool on `name`; fail (CI) or skip (elsewhere) when it cannot run here.
    "docker+image": docker sessions from published_test_image()."""
    if name in _unavailable:
        _missing(name, _unavailable[name])
    if name == "docker+image":
        try:
            options["image"] = published_test_image()
        except (OSError, subprocess.CalledProcessError, SandboxUnavailable) as exc:
            _unavailable[name] = f"cannot build a published-style image: {exc}"
            _missing(name, _unavailable[name])
        name = "docker"
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
