"""Sandbox HTTP service: requests/s and latency percentiles on the A+B workload, one table.

    python benchmarks/sandbox_service.py [--backend docker] [--requests 200] [--clients 16]

Starts `python -m sandbox serve` as a subprocess, then `--clients` concurrent httpx clients send
`--requests` requests per row over real TCP:
  /run_code   SandboxFusion-style, one A+B run per request (Python, then C++)
  /judge      our endpoint, one A+B submission with --tests-per-judge tests per request
Every reply is checked (status 200 and the right answer); the server's peak RSS is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from gspo_agents.tracking import BenchProgress

REPO = Path(__file__).resolve().parents[1]
SOURCES = {
    "python": "a, b = map(int, input().split())\nprint(a + b)\n",
    "cpp": '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n',
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "sandbox",
        "serve",
        "--port",
        str(port),
        "--backend",
        args.backend,
        "--max-concurrency",
        str(args.max_concurrency),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if proc.poll() is not None:
            sys.exit(f"server exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("server did not start")


def request_for(
    endpoint: str, lang: str, i: int, tests_per_judge: int
) -> tuple[dict[str, Any], Any]:
    if endpoint == "/run_code":
        return {"code": SOURCES[lang], "language": lang, "stdin": f"{i} {i + 1}"}, f"{2 * i + 1}"
    tests = [{"stdin": f"{i} {j}", "expected": str(i + j)} for j in range(tests_per_judge)]
    return {"language": lang, "source": SOURCES[lang], "tests": tests}, "OK"


def check(endpoint: str, reply: httpx.Response, want: Any) -> bool:
    if reply.status_code != 200:
        return False
    body = reply.json()
    if endpoint == "/run_code":
        return body["status"] == "Success" and body["run_result"]["stdout"].strip() == want
    return body["verdict"] == want


async def measure(
    url: str, endpoint: str, lang: str, args: argparse.Namespace, progress: BenchProgress
) -> dict[str, float]:
    latencies: list[float] = []
    correct = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(args.requests):
        queue.put_nowait(i)

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal correct
        while not queue.empty():
            i = queue.get_nowait()
            body, want = request_for(endpoint, lang, i, args.tests_per_judge)
            start = time.perf_counter()
            reply = await client.post(endpoint, json=body)
            latencies.append(time.perf_counter() - start)
            correct += check(endpoint, reply, want)
            progress.tick()

    async with httpx.AsyncClient(
        base_url=url, timeout=300, limits=httpx.Limits(max_connections=args.clients)
    ) as client:
        # Warm-up: fill the backend's pool and compile caches, untimed.
        await asyncio.gather(
            *(
                client.post(endpoint, json=request_for(endpoint, lang, 0, args.tests_per_judge)[0])
                for _ in range(args.max_concurrency)
            )
        )
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(args.clients)))
        elapsed = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {
        "rps": args.requests / elapsed,
        "p50": q[49],
        "p90": q[89],
        "p99": q[98],
        "correct": correct,
    }


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-concurrency", type=int, default=4)
    parser.add_argument("--tests-per-judge", type=int, default=20)
    args = parser.parse_args()
    proc, url = start_server(args)
    rows = []
    endpoints, langs = ("/run_code", "/judge"), ("python", "cpp")
    progress = BenchProgress(
        "requests, all rows", len(endpoints) * len(langs) * args.requests, min_interval_s=5.0
    )
    try:
        for endpoint in endpoints:
            for lang in langs:
                stats = await measure(url, endpoint, lang, args, progress)
                print(f"  measured {endpoint} {lang}: {stats}", file=sys.stderr)
                rows.append((endpoint, lang, stats))
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"\nbackend {args.backend}, max_concurrency {args.max_concurrency}, {args.clients} "
        f"clients, {args.requests} requests per row; /judge = {args.tests_per_judge} tests "
        f"per request; server peak RSS {rss:.0f} MB\n"
    )
    print("| endpoint | lang | requests/s | tests/s | p50 ms | p90 ms | p99 ms | correct |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for endpoint, lang, s in rows:
        per = args.tests_per_judge if endpoint == "/judge" else 1
        print(
            f"| {endpoint} | {lang} | {s['rps']:.1f} | {s['rps'] * per:.1f} | "
            f"{s['p50'] * 1000:.0f} | {s['p90'] * 1000:.0f} | {s['p99'] * 1000:.0f} | "
            f"{int(s['correct'])}/{args.requests} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
