"""The HTTP service for real: `python -m sandbox serve` in a subprocess, httpx over TCP."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sbtest_util import make_sandbox

REPO = Path(__file__).resolve().parents[2]
AB_PY = "a, b = map(int, input().split())\nprint(a + b)\n"
AB_CPP = '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(backend: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    make_sandbox(backend)  # fail (CI) / skip here, with the reason, if the backend is missing
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "serve",
            "--port",
            str(port),
            "--backend",
            backend,
            *extra,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server died: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not come up in 60 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    proc, url = _start("bubblewrap", "--max-concurrency", "4")
    try:
        yield proc, url
    finally:
        _stop(proc)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def test_judge_endpoint_runs_real_programs(server: tuple[object, str]) -> None:
    _, url = server
    body = {
        "language": "cpp",
        "source": AB_CPP,
        "tests": [{"stdin": "1 2", "expected": "3"}, {"stdin": "2 2", "expected": "5"}],
    }
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        reply = (await client.post("/judge", json=body)).json()
    assert reply["verdict"] == "WA" and reply["passed"] == 1 and reply["total"] == 2
    assert [t["verdict"] for t in reply["tests"]] == ["OK", "WA"]
    assert reply["backend"] == "bubblewrap"


async def test_function_style_tests_over_http(server: tuple[object, str]) -> None:
    _, url = server
    source = (
        "class Solution:\n    def twoSum(self, nums, target):\n"
        "        seen = {}\n        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n                return [seen[target - x], i]\n"
        "            seen[x] = i\n"
    )
    body = {
        "language": "python",
        "source": source,
        "function": "Solution.twoSum",
        "tests": [
            {"args": [[2, 7, 11, 15], 9], "expected": [0, 1]},
            {"kwargs": {"nums": [3, 2, 4], "target": 6}, "expected": [1, 2]},
            {"args": [[3, 3], 6], "expected": [1, 0]},
        ],
    }
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        reply = (await client.post("/judge", json=body)).json()
    assert [t["verdict"] for t in reply["tests"]] == ["OK", "OK", "WA"], reply


async def test_run_code_speaks_sandboxfusion(server: tuple[object, str]) -> None:
    _, url = server
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        ok = (
            await client.post(
                "/run_code",
                json={
                    "code": AB_PY,
                    "language": "python",
                    "stdin": "20 22",
                    "run_timeout": 5,
                    "memory_limit_MB": 256,
                },
            )
        ).json()
        tle = (
            await client.post(
                "/run_code",
                json={"code": "while True: pass", "language": "python", "run_timeout": 1},
            )
        ).json()
        ce = (await client.post("/run_code", json={"code": "int main({", "language": "cpp"})).json()
        re_ = (
            await client.post(
                "/run_code", json={"code": "import sys\nsys.exit(4)", "language": "python"}
            )
        ).json()
    assert ok["status"] == "Success" and ok["run_result"]["stdout"] == "42\n"
    assert ok["run_result"]["return_code"] == 0 and ok["run_result"]["status"] == "Finished"
    assert isinstance(ok["run_result"]["execution_time"], float)
    assert set(ok) >= {"status", "message", "compile_result", "run_result", "files"}
    assert tle["status"] == "Failed" and tle["run_result"]["status"] == "TimeLimitExceeded"
    assert ce["status"] == "Failed" and ce["run_result"] is None
    assert "error" in ce["compile_result"]["stderr"]
    assert re_["status"] == "Failed" and re_["run_result"]["return_code"] == 4


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"language": "rust", "source": "fn main(){}", "tests": [{"stdin": ""}]}', "language"),
        (b'{"language": "python", "tests": [{"stdin": ""}]}', "source"),
        (b'{"language": "python", "source": "print(1)"}', "tests"),
        (b'{"language": "python", "source": "print(1)", "tests": []}', "tests"),
        (b'{"language": "python", "source": 5, "tests": [{"stdin": ""}]}', "source"),
        (
            b'{"language": "python", "source": "", "tests": [{"stdin": ""}], "limits": {"time_s": -1}}',
            "time_s",
        ),
        (
            b'{"language": "python", "source": "", "tests": [{"stdin": ""}], "limits": {"tme_s": 1}}',
            "tme_s",
        ),
        (
            b'{"language": "python", "source": "", "tests": [{"stdin": ""}], "judge": {"mode": "x"}}',
            "mode",
        ),
    ],
)
async def test_malformed_judge_requests_get_400_with_a_reason(
    server: tuple[object, str], payload: bytes, needle: str
) -> None:
    _, url = server
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        reply = await client.post(
            "/judge", content=payload, headers={"content-type": "application/json"}
        )
    assert reply.status_code == 400, reply.text
    assert needle in reply.json()["error"]


async def test_malformed_run_code_and_huge_bodies_get_4xx(server: tuple[object, str]) -> None:
    _, url = server
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        missing = await client.post("/run_code", json={"language": "python"})
        unknown = await client.post("/run_code", json={"code": "x", "language": "cobol"})
        huge = await client.post("/run_code", json={"code": "#" * (10 << 20), "language": "python"})
        wrong_method = await client.get("/run_code")
    assert missing.status_code == 400 and "code" in missing.json()["error"]
    assert unknown.status_code == 400 and "cobol" in unknown.json()["error"]
    assert huge.status_code == 413 and "limit" in huge.json()["error"]
    assert wrong_method.status_code == 405


async def test_200_concurrent_requests_get_correct_verdicts(server: tuple[object, str]) -> None:
    proc, url = server
    async with httpx.AsyncClient(
        base_url=url, timeout=300, limits=httpx.Limits(max_connections=200)
    ) as client:

        async def one(i: int) -> tuple[int, str]:
            source = AB_PY if i % 3 else "print(0)"
            reply = await client.post(
                "/run_code", json={"code": source, "language": "python", "stdin": f"{i} {i}"}
            )
            assert reply.status_code == 200, reply.text
            return i, reply.json()["run_result"]["stdout"]

        results = await asyncio.gather(*(one(i) for i in range(200)))
    for i, stdout in results:
        assert stdout.strip() == (str(2 * i) if i % 3 else "0"), (i, stdout)
    assert _peak_rss_mb(proc.pid) < 400  # type: ignore[attr-defined]


async def test_full_queue_answers_429_with_retry_after() -> None:
    proc, url = _start("bubblewrap", "--max-concurrency", "1", "--max-queue", "0")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            slow = {"code": "import time\ntime.sleep(2)", "language": "python", "run_timeout": 5}
            replies = await asyncio.gather(*(client.post("/run_code", json=slow) for _ in range(3)))
    finally:
        _stop(proc)
    codes = sorted(r.status_code for r in replies)
    assert codes[0] == 200 and 429 in codes, codes
    rejected = next(r for r in replies if r.status_code == 429)
    assert rejected.headers["retry-after"] == "1"


def test_server_binds_loopback_by_default() -> None:
    from sandbox.cli import _parser

    args = _parser().parse_args(["serve"])
    assert args.host == "127.0.0.1"
