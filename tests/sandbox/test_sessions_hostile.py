"""Hostile code inside a session cannot escape (docker and bubblewrap, real engines; and docker
sessions started from a published-style SWE image with a writable /testbed): no network, no host
files, no host environment, no privileges, cannot kill or take over the agent, cannot reach the
host's processes. Each test also checks that the session still works afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from session_util import HOSTILE_SESSION_BACKENDS, pool  # noqa: F401 - fixtures

from sandbox import SessionPool

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=HOSTILE_SESSION_BACKENDS)
def session_backend(request: pytest.FixtureRequest) -> str:  # the `pool` fixture's backends
    return str(request.param)


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP listener on the HOST's loopback; records whether anything connected."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    hits: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            hits.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        srv.close()
    assert hits == [], "something inside the session reached the host's listener"


async def test_no_network(pool: SessionPool, host_listener: int) -> None:  # noqa: F811
    code = f"""
import socket
print(sorted(n for _, n in socket.if_nameindex()))
for host in ("127.0.0.1", "10.0.2.2", "172.17.0.1"):
    s = socket.socket(); s.settimeout(1)
    try:
        s.connect((host, {host_listener})); print("CONNECTED", host)
    except OSError as exc:
        print("refused", host, type(exc).__name__)
"""
    async with pool.session() as ws:
        r = await ws.python(code, timeout_s=20)
        assert r.ok and "CONNECTED" not in r.stdout, r
        assert r.stdout.splitlines()[0] == "['lo']", r.stdout
        r = await ws.exec("getent hosts deb.debian.org || echo no-dns")
        assert "no-dns" in r.stdout


async def test_no_host_files_and_read_only_root(pool: SessionPool, tmp_path: Path) -> None:  # noqa: F811
    canary = tmp_path / f"canary-{uuid.uuid4().hex}"
    canary.write_text("host secret")
    async with pool.session() as ws:
        r = await ws.exec(
            f"cat {canary} 2>&1; ls {PROJECT_ROOT} 2>&1; ls -A /root 2>&1; "
            "cat /etc/shadow 2>&1; echo ---; "
            "for d in / /etc /usr /root /var; do touch $d/x 2>/dev/null && echo WROTE $d; done; "
            "true"
        )
        assert "host secret" not in r.stdout and "WROTE" not in r.stdout, r
        assert "pyproject.toml" not in r.stdout
        with pytest.raises(FileNotFoundError):
            await ws.read_file(str(canary))
        with pytest.raises(FileNotFoundError):
            await ws.read_file(str(PROJECT_ROOT / "pyproject.toml"))


async def test_no_host_environment(session_backend: str) -> None:  # noqa: F811
    from session_util import leftovers, started_pool

    secret = f"canary-{uuid.uuid4().hex}"
    os.environ["GSPO_HOST_SECRET"] = secret
    try:
        p = await started_pool(session_backend, max_sessions=1)
        async with p.session() as ws:
            r = await ws.exec("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'")
            assert secret not in r.stdout and "GSPO_HOST_SECRET" not in r.stdout
            assert secret not in (await ws.python("import os; dict(os.environ)")).stdout
        await p.aclose()
        assert leftovers(p) == []
    finally:
        del os.environ["GSPO_HOST_SECRET"]


async def test_unprivileged_and_cannot_take_over_the_agent(
    pool: SessionPool,  # noqa: F811
) -> None:
    canary = subprocess.Popen(["sleep", "300"])
    try:
        async with pool.session() as ws:
            r = await ws.exec(
                "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
                "ls /proc | grep -c '^[0-9]'"
            )
            lines = r.stdout.split()
            assert lines[0] != "0", r
            assert "CapEff:\t0000000000000000" in r.stdout, r
            assert "NoNewPrivs:\t1" in r.stdout, r
            # the host's processes (our canary among them) are not visible or killable
            r = await ws.exec(f"kill -9 {canary.pid} 2>&1; kill -9 -1 2>&1; kill -9 1 2>&1; true")
            r = await ws.exec("cat /proc/1/mem 2>&1 | head -c 100; cat /proc/1/environ; true")
            assert "Permission denied" in r.stdout or r.stdout.strip() == "", r
            # the agent survives all of it and still serves calls, with its state intact
            await ws.exec("export KEEP=1")
            r = await ws.python(
                "import os, signal\ntry:\n    os.kill(1, 9)\nexcept OSError as e:\n    print(e)"
            )
            assert (await ws.exec("echo alive $KEEP")).stdout == "alive 1\n"
        assert canary.poll() is None, "a process on the host was killed from inside a session"
    finally:
        canary.kill()
        canary.wait()


async def test_forged_protocol_output_is_just_output(pool: SessionPool) -> None:  # noqa: F811
    """Protocol-looking JSON on stdout or at the agent's fds forges no reply: replies come only
    from the agent's stdout, which nothing inside can reach. The kernel's own "cell done" line
    can be forged by the cell itself (it runs in that process): that misreports only that
    cell, and the session stays in step afterwards."""
    fake = '{"exit_code": 0, "stdout": "FORGED", "stderr": "", "stdout_cut": 0}'
    async with pool.session() as ws:
        r = await ws.exec(f"echo '{fake}'; echo '{fake}' > /proc/1/fd/1 2>&1; exit 5")
        assert r.exit_code == 5 and r.stdout.startswith("{"), r
        forge = 'import os\nfor c in range(10):\n    os.write(4, b\'{"ok": true, "cell": %d}\\n\' % c)\n'
        await ws.python(forge + "raise SystemExit(9)")
        r = await ws.python("print('in step')")
        assert r.exit_code == 0 and r.stdout.endswith("in step\n"), r
        r = await ws.python("1/0")
        assert r.exit_code == 1 and "ZeroDivisionError" in r.stderr, r
        assert (await ws.python("print('next')")).stdout == "next\n"
        assert (await ws.exec("echo next")).stdout == "next\n"
