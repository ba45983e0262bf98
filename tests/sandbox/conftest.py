"""Fixtures for the sandbox tests: one `sandbox` per available backend, plus leftover checks.

Under CI=true a backend that cannot start FAILS the test (docker and bubblewrap are installed by
.ci/setup_sandbox.sh); elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator

import pytest
from sbtest_util import ISOLATING_BACKENDS, checked_sandbox

from sandbox import Sandbox


@pytest.fixture(params=ISOLATING_BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def sandbox(backend_name: str) -> AsyncIterator[Sandbox]:
    # Every test doubles as a leftover check: nothing of this sandbox may survive aclose().
    async with checked_sandbox(backend_name) as sb:
        yield sb


@pytest.fixture
def host_canary_process() -> Iterator[subprocess.Popen[bytes]]:
    """A host process the sandboxed program must not be able to harm."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
