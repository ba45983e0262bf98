"""Sandbox confinement (SANDBOX.md 5, 6, 9, 13; issue 13): the syscall filter holds, every writable
tmpfs is capped, loopback works and nothing routes out, no build-host identity leaks, and the
sandbox dies with its host process, on every isolating backend.

Every case on a slot is followed by `assert_next_run_clean` (integrity_util.py), as in
test_sandbox_integrity.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from integrity_util import assert_next_run_clean, py, slot_fixture  # noqa: F401 - `slot`
from sbtest_util import make_sandbox, processes_of_uids

from sandbox import Limits, Sandbox, TestCase, Verdict

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# 4. syscall filter, tmpfs caps, loopback, identity -----------------------------------------------
SYSCALLS = r"""
import ctypes, errno, json, platform
libc = ctypes.CDLL(None, use_errno=True)
x86 = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250,
       "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
       "userfaultfd": 323, "mount": 165, "umount2": 166, "unshare": 272, "setns": 308,
       "ptrace": 101, "process_vm_readv": 310, "pivot_root": 155, "fsopen": 430}
arm = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219,
       "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
       "userfaultfd": 282, "mount": 40, "umount2": 39, "unshare": 97, "setns": 268,
       "ptrace": 117, "process_vm_readv": 270, "pivot_root": 41, "fsopen": 430}
table = x86 if platform.machine() == "x86_64" else arm
out = {}
for name, nr in table.items():
    # harmless arguments: each call would fail anyway, we only look at how it is refused
    args = {"unshare": (0x10000000,), "ptrace": (16, 1), "keyctl": (0, -3)}.get(name, (0, 0))
    rc = libc.syscall(nr, *args)
    out[name] = errno.errorcode.get(ctypes.get_errno(), "?") if rc == -1 else f"returned {rc}"
CLONE_NEWUSER = 0x10000000
clone = 56 if platform.machine() == "x86_64" else 220
rc = libc.syscall(clone, CLONE_NEWUSER | 17, 0, 0, 0, 0)  # 17 = SIGCHLD
if rc == 0:
    libc._exit(0)
out["clone(CLONE_NEWUSER)"] = errno.errorcode.get(ctypes.get_errno(), "?") if rc == -1 else "ok"
print(json.dumps(out))
"""


async def test_dangerous_syscalls_are_denied(slot: Sandbox) -> None:
    result = await slot.run(py(SYSCALLS), [TestCase("")])
    assert result.verdict is Verdict.OK, result
    report = json.loads(result.tests[0].stdout)
    for name, outcome in report.items():
        expected = ("ENOSYS",) if name.startswith("io_uring") else ("EPERM",)
        assert outcome in expected, (name, outcome, report)
    await assert_next_run_clean(slot)


TMPFS_CAPS = r"""
import json
sizes = {}
for path in ("/tmp/big", "/dev/shm/big"):
    written = 0
    try:
        with open(path, "wb") as f:
            for _ in range(1024):
                f.write(b"x" * (1 << 20))
                written += 1
    except OSError:
        pass
    sizes[path] = written
print(json.dumps(sizes))
"""


async def test_every_writable_tmpfs_is_capped(slot: Sandbox) -> None:
    result = await slot.run(py(TMPFS_CAPS), [TestCase("")], Limits(time_s=10, wall_time_s=60))
    assert result.verdict is Verdict.OK, result
    sizes = json.loads(result.tests[0].stdout)
    assert all(mb <= 300 for mb in sizes.values()), sizes  # 256 MB caps, not half the RAM
    await assert_next_run_clean(slot)


LOOPBACK = r"""
import json, socket, threading
server = socket.socket()
server.bind(("localhost", 0))
server.listen()
def echo():
    conn, _ = server.accept()
    conn.sendall(conn.recv(100).upper())
    conn.close()
threading.Thread(target=echo).start()
client = socket.create_connection(("localhost", server.getsockname()[1]), timeout=5)
client.sendall(b"ping")
reply = client.recv(100).decode()
routes = open("/proc/net/route").read().splitlines()[1:]
ifaces = sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:])
print(json.dumps({"reply": reply, "routes": routes, "interfaces": ifaces,
                  "localhost": socket.gethostbyname("localhost")}))
"""


async def test_loopback_up_localhost_resolves_no_route_out(slot: Sandbox) -> None:
    result = await slot.run(py(LOOPBACK), [TestCase("")], Limits(time_s=5))
    assert result.verdict is Verdict.OK, result
    report = json.loads(result.tests[0].stdout)
    assert report == {
        "reply": "PING",
        "routes": [],  # IPv4 routes other than loopback's: none
        "interfaces": ["lo"],
        "localhost": "127.0.0.1",
    }, report
    await assert_next_run_clean(slot)


IDENTITY = r"""
import json
def read(p):
    try:
        return open(p).read()
    except OSError:
        return ""
print(json.dumps({p: read(p) for p in ("/etc/hostname", "/etc/resolv.conf", "/etc/hosts")}))
"""


async def test_no_build_host_identity(slot: Sandbox) -> None:
    result = await slot.run(py(IDENTITY), [TestCase("")])
    assert result.verdict is Verdict.OK, result
    files = json.loads(result.tests[0].stdout)
    assert files["/etc/hostname"].strip() == "sandbox", files
    host_names = {socket.gethostname(), Path("/etc/hostname").read_text().strip()} - {""}
    resolv = Path("/etc/resolv.conf").read_text() if Path("/etc/resolv.conf").exists() else ""
    host_servers = {
        line.split()[1] for line in resolv.splitlines() if line.startswith("nameserver")
    }
    for text in files.values():
        words = set(text.split())
        assert not words & (host_names | (host_servers - {"127.0.0.1"})), files
    await assert_next_run_clean(slot)


# the sandbox dies with the host process -----------------------------------------------------------
HOST_SCRIPT = r"""
import asyncio, json, sys
from sandbox import Limits, Program, Sandbox, TestCase
async def main():
    sb = Sandbox.create(sys.argv[1], max_concurrency=1)
    print(json.dumps(sb._backend.uids), flush=True)
    await sb.run(Program("python", "import time\ntime.sleep(1000)"), [TestCase("")],
                 Limits(time_s=1, wall_time_s=600))
asyncio.run(main())
"""


@pytest.mark.parametrize("backend_name", ["bubblewrap", "namespaces"])
async def test_sandbox_dies_with_its_host_process(backend_name: str) -> None:
    make_sandbox(backend_name)  # skip (fail under CI) where the backend cannot run
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, backend_name], stdout=subprocess.PIPE, env=env
    )
    try:
        assert host.stdout is not None
        uids = set(json.loads(host.stdout.readline()))
        deadline = time.monotonic() + 60
        while not processes_of_uids(uids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_of_uids(uids), "the sandboxed program never started"
        host.send_signal(signal.SIGKILL)
        host.wait()
        deadline = time.monotonic() + 10
        while processes_of_uids(uids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_of_uids(uids) == []
    finally:
        host.kill()
        host.wait()
