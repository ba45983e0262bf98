"""Helper of the sandbox-session env tests: reset an env, failing (CI=true) or skipping (elsewhere)
when its session backend cannot run here."""

from __future__ import annotations

import os
from typing import Any

import pytest

from envs.errors import InfraError


async def reset_or_fail(env: Any, task: dict[str, Any], backend: str) -> None:
    try:
        await env.areset(options={"task": task})
    except InfraError as exc:
        message = f"session backend {backend!r} unavailable: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
