"""Helpers shared by the hardening suite (imported by conftest and the test modules): the train CLI as a subprocess, and dockerd control.

Every fault here is real: a real `python -m gspo_agents.train` process, a real dockerd restarted
by signal, a real read-only bind mount or full tmpfs, a real NaN inside a real model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from timing import patience
from tiny_run import TINY_RUN

# The tiny-model, few-task settings (tests/tiny_run.py), without wandb: a step takes ~1 s.
FAST = [*TINY_RUN, "logger.wandb_mode=disabled"]
IN_CI = os.environ.get("CI", "").lower() == "true"


def train_cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gspo_agents.train",
        f"trainer.run_dir={run_dir}",
        *FAST,
        *overrides,
    ]


def train(run_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the train CLI to completion; returns the finished process (any exit status)."""
    return subprocess.run(
        train_cmd(run_dir, *overrides), capture_output=True, text=True, timeout=patience(timeout)
    )


def start_train(run_dir: Path, *overrides: str, log: Path) -> subprocess.Popen:
    out = log.open("w")
    return subprocess.Popen(
        train_cmd(run_dir, *overrides), stdout=out, stderr=subprocess.STDOUT, text=True
    )


def metric_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + patience(timeout_s)  # scaled by the machine's load
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before: {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {patience(timeout_s):.0f}s waiting for: {what}")


def need(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (CI=true) when a required real component is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


# --------------------------------------------------------------------------------------------
# dockerd: this machine has no systemd; the daemon runs as a plain background process.
# --------------------------------------------------------------------------------------------
DOCKERD_LOG = "/var/log/gspo-dockerd.log"


def dockerd_pid() -> int | None:
    out = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _dockerd_launch(pid: int | None) -> tuple[list[str], str]:
    """The running daemon's own command line and log file, to start it again the same way."""
    argv, log = ["dockerd"], DOCKERD_LOG
    if pid is not None:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        argv = [a.decode() for a in raw if a] or argv
        target = os.readlink(f"/proc/{pid}/fd/2")
        if target.startswith("/") and Path(target).is_file():
            log = target
    return argv, log


def start_dockerd(argv: list[str], log: str, timeout_s: float = 90) -> None:
    """`nohup dockerd >log 2>&1 &` as .ci/setup_sandbox.sh does: its own session, outlives us."""
    with open(log, "ab") as out:
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if docker_answers():
            return
        time.sleep(0.5)
    raise RuntimeError(f"dockerd did not come back within {timeout_s}s; see {log}")


def stop_dockerd(pid: int, timeout_s: float = 60) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


class Dockerd:
    """Restart the real daemon; the fixture guarantees it runs again afterwards, pass or fail."""

    def __init__(self) -> None:
        self.pid = dockerd_pid()
        self.argv, self.log = _dockerd_launch(self.pid)

    def restart(self) -> None:
        pid = dockerd_pid()
        if pid is not None:
            stop_dockerd(pid)
        start_dockerd(self.argv, self.log)
        self.pid = dockerd_pid()

    def ensure_running(self) -> None:
        if dockerd_pid() is None or not docker_answers():
            if dockerd_pid() is None:
                start_dockerd(self.argv, self.log)
            else:  # starting up, or wedged: give it time before declaring failure
                wait_for(docker_answers, 90, "dockerd to answer")
