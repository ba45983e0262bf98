"""Sandbox services as real processes for the fleet tests: start, stop, kill, inspect.

Each service is `python -m sandbox serve` in a subprocess on a free loopback port, with the token
in its environment. Under CI=true a missing tool (bwrap, haproxy, docker) fails the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hydra import compose, initialize_config_dir
from sbtest_util import make_sandbox

from gspo_agents.config import CONFIG_DIR, check_choices, register_schemas

REPO = Path(__file__).resolve().parents[2]
TOKEN = "fleet-test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START_WAIT_S = 120.0  # a cold start on a loaded 2-core machine


def compose_run(*overrides: str):
    """The training run's config with these overrides, checked as `train` checks it."""
    register_schemas()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    check_choices(cfg)
    return cfg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (.ci/setup_sandbox.sh installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    url: str
    port: int

    def capacity(self) -> dict:
        return httpx.get(self.url + "/capacity", headers=AUTH, timeout=30).json()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.kill()


def start_service(
    *extra: str, backend: str = "bubblewrap", token: str | None = TOKEN, sessions: int = 4
) -> Service:
    make_sandbox(backend)  # fail (CI) / skip here, with the reason, if the backend is missing
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "GSPO_SANDBOX_TOKEN"}
    if token is not None:
        env["GSPO_SANDBOX_TOKEN"] = token
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    argv = [sys.executable, "-m", "sandbox", "serve", "--port", str(port)]
    argv += ["--backend", backend, "--max-concurrency", "2"]
    if sessions:
        argv += ["--max-sessions", str(sessions), "--session-backend", backend]
    proc = subprocess.Popen(
        [*argv, *extra], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    service = Service(proc, f"http://127.0.0.1:{port}", port)
    wait_healthy(service)
    return service


def wait_healthy(service: Service) -> None:
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            err = service.proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            raise RuntimeError(f"service died: {err}")
        try:
            if httpx.get(service.url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)
    service.kill()
    raise RuntimeError(f"service did not come up in {START_WAIT_S:.0f} s")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (by parent links in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists()}
