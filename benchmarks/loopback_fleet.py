"""Sandbox services on loopback for the benchmarks' `remote` rows: start N, yield their URLs, stop.

Each is `python -m sandbox serve` in a subprocess with a fresh token (in its environment and
returned for the client), so the rows measure the real path: HTTP, the token check, the fleet
client's placement, the service's own sandbox.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def loopback_fleet(
    n: int, *, backend: str, max_concurrency: int, sessions: int = 0
) -> Iterator[tuple[list[str], str]]:
    """(urls, token) of n running services; all stopped (SIGTERM, drained) on exit."""
    token = secrets.token_urlsafe(24)
    env = {**os.environ, "GSPO_SANDBOX_TOKEN": token}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for _ in range(n):
            port = _free_port()
            argv = [sys.executable, "-m", "sandbox", "serve", "--port", str(port)]
            argv += ["--backend", backend, "--max-concurrency", str(max_concurrency)]
            if sessions:
                argv += ["--max-sessions", str(sessions), "--session-backend", backend]
            procs.append(subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.PIPE))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls):
            _wait(proc, url)
        yield urls, token
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise RuntimeError(f"service at {url} did not start")
