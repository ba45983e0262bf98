"""Where the pinned SGLang 0.5.23 packages are (scripts/setup_sglang_conformance.sh) for the tests
that check against SGLang's own code in a subprocess; skip without them, fail under CI=true."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def conformance_dir() -> Path:
    default = Path.home() / ".cache" / "gspo-agents" / "sglang-conformance"
    path = Path(os.environ.get("GSPO_SGLANG_CONFORMANCE_DIR", default))
    if not (path / "sglang").is_dir() or not list(path.glob(".installed-*")):
        message = (
            f"SGLang's request classes are not installed in {path}: run "
            "`bash scripts/setup_sglang_conformance.sh` (about 1.2 GB, no GPU stack)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
