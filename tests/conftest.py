"""Fixtures shared by the learner tests: tiny random checkpoints from tests/dist/tiny.py.

Module-scoped (each test module builds its own, as it did before they were shared); `tiny` is
imported when a fixture runs, so collecting tests that use none of them imports no torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

DIST_DIR = Path(__file__).parent / "dist"


def _build_tiny_model(tmp_path_factory: pytest.TempPathFactory, name: str, **kw) -> str:
    if str(DIST_DIR) not in sys.path:
        sys.path.insert(0, str(DIST_DIR))
    from tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp(name), **kw)


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Qwen3 checkpoint (an HF directory)."""
    return _build_tiny_model(tmp_path_factory, "dense")


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Qwen3-MoE checkpoint (an HF directory)."""
    return _build_tiny_model(tmp_path_factory, "moe", moe=True)


# Repositories the SWE tests load as task data: their own tests are not ours to collect.
collect_ignore_glob = ["envs/swe_fixtures/*"]


SLOW_BY_MEASURE = Path(__file__).parent / "slow_by_measure.txt"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `slow` the tests tests/slow_by_measure.txt lists (moved out of the fast tier by their
    measured CI durations; the file says why)."""
    listed = {
        line.strip()
        for line in SLOW_BY_MEASURE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    if len(items) >= 1000:  # the whole suite collected: a renamed test must not slip back in
        stale = listed - {item.nodeid for item in items}
        if stale:
            raise pytest.UsageError(
                "tests/slow_by_measure.txt names tests that no longer exist (renamed or removed?): "
                + ", ".join(sorted(stale))
                + "; update the file"
            )
