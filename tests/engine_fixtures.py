"""Fixtures shared by the tests that talk to `python -m gspo_agents.serve` over HTTP.

Load them with `pytest_plugins = ["engine_fixtures"]` (do not import this module: pytest loads
it as a plugin); helpers are in engine_helpers.py. Module-scoped fixtures are one per test module.

- `tiny_path`: the tiny model's directory; `reference`: that model loaded, for log-prob checks.
- `server`: one server subprocess on the tiny model (one torch thread), stopped after the module.
"""

from __future__ import annotations

import pytest
from engine_helpers import launch_tiny, tiny_model_path

from gspo_agents.models import load_model


@pytest.fixture(scope="module")
def tiny_path() -> str:
    return tiny_model_path()


@pytest.fixture(scope="module")
def reference(tiny_path):
    return load_model(tiny_path)


@pytest.fixture(scope="module")
def server(tiny_path):
    with launch_tiny(tiny_path) as srv:
        yield srv
