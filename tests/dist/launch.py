"""Run a script under torchrun (gloo on CPU) from a test; shared by the distributed tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DIST_DIR = Path(__file__).resolve().parent


def torchrun(script: str, *args: str, nproc: int = 2, timeout_s: float = 300) -> str:
    """Launch tests/dist/<script> with `nproc` processes; returns stdout, raises with the logs on failure."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(DIST_DIR / script),
        *args,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(
            f"torchrun {script} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-8000:]}"
        )
    return proc.stdout
