"""An SGLang worker stand-in that answers /generate at once and as cheaply as it can (issue 33).

A measuring instrument for the driving process, not a test double for correctness: a raw
asyncio Protocol speaking just enough HTTP/1.1 (keep-alive, Content-Length bodies) that the
client, not the server, is the bottleneck. A /generate answer carries `max_new_tokens` (read
from the end of the body, where the sampling params sit; the history before it is never parsed)
output ids with log-probs, the last one the stop id when the whole answer fits. The info
endpoints SGLangEngine reads at start answer a fixed body; anything else is 404.

Run:  python benchmarks/instant_sglang.py --port 30000 [--tokens-per-turn 32 --stop-id 2]
It prints "ready <port>" once it listens. benchmarks/instant_sglang.c is the same stand-in in C
(the same answers byte for byte, a fraction of the CPU per request); `launch()` runs it where a C
compiler is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_MAX_NEW = re.compile(rb'"max_new_tokens":(\d+)')
_INFO = json.dumps({"weight_version": "default", "model_path": "instant"}).encode()
_OK = json.dumps({"success": True}).encode()


def _response(status: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % (status, len(body)) + body


class Answers:
    """Canned /generate answers, one per max_new_tokens asked for."""

    def __init__(self, answer_ids: list[int], stop_id: int) -> None:
        self._ids = answer_ids
        self._stop = stop_id
        self._cache: dict[int, bytes] = {}
        self.fixed = {
            b"/server_info": _response(b"200 OK", _INFO),
            b"/model_info": _response(b"200 OK", _INFO),
            b"/health": _response(b"200 OK", b"{}"),
            b"/abort_request": _response(b"200 OK", _OK),
        }
        self.missing = _response(b"404 Not Found", b'{"error":"not found"}')

    def generate(self, tail: bytes) -> bytes:
        found = _MAX_NEW.findall(tail)  # the last one: the body's own, after the history
        n = int(found[-1]) if found else len(self._ids)
        cached = self._cache.get(n)
        if cached is None:
            ids = (self._ids * (n // max(len(self._ids), 1) + 1))[:n]
            if n >= len(self._ids):
                ids[-1] = self._stop
            finish = {"type": "stop"} if ids and ids[-1] == self._stop else {"type": "length"}
            meta = {
                "output_token_logprobs": [[-1.0, i, None] for i in ids],
                "finish_reason": finish,
                "prompt_tokens": 0,
                "cached_tokens": 0,
            }
            cached = self._cache[n] = _response(b"200 OK", json.dumps({"meta_info": meta}).encode())
        return cached


class _Connection(asyncio.Protocol):
    def __init__(self, answers: Answers) -> None:
        self._answers = answers
        self._buf = bytearray()
        self._need = -1  # bytes of the current request (head + body) once its head is read
        self._path = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        while True:
            if self._need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buf[:end]).lower()
                self._path = head.split(b" ", 2)[1].split(b"?", 1)[0]
                at = head.find(b"\r\ncontent-length:")
                eol = head.find(b"\r\n", at + 2)  # -1: it is the head's last line
                length = int(head[at + 17 : eol if eol >= 0 else len(head)]) if at >= 0 else 0
                self._need = end + 4 + length
            if len(buf) < self._need:
                return
            need, path = self._need, self._path
            if path == b"/generate":
                out = self._answers.generate(bytes(buf[max(0, need - 400) : need]))
            else:
                out = self._answers.fixed.get(path, self._answers.missing)
            del buf[:need]
            self._need = -1
            assert self._transport is not None
            self._transport.write(out)


async def serve(port: int, answers: Answers) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(answers), "127.0.0.1", port, backlog=4096)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


SOURCE_C = Path(__file__).with_suffix(".c")


def c_binary() -> Path | None:
    """instant_sglang.c built once per source version (cached); None without a C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    digest = hashlib.sha256(SOURCE_C.read_bytes()).hexdigest()[:16]
    out = Path.home() / ".cache" / "gspo-agents" / "bench" / f"instant_sglang-{digest}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        built = subprocess.run(
            [cc, "-O2", "-o", str(tmp), str(SOURCE_C)], capture_output=True, text=True
        )
        if built.returncode != 0:
            print(f"instant_sglang.c did not build ({built.stderr.strip()[:300]})", file=sys.stderr)
            return None
        tmp.replace(out)
    return out


class StandIns(list):
    """The stand-ins' URLs (a list of str), with their process ids in `pids`."""

    def __init__(self, urls: list[str], pids: list[int]) -> None:
        super().__init__(urls)
        self.pids = pids

    def cpu_seconds(self) -> float:
        """User + system CPU the stand-in processes have used so far (Linux /proc)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (man 5 proc: 14, 15)
        return total / tick


@contextlib.contextmanager
def launch(n: int, answer: list[int], stop_id: int, impl: str = "auto"):
    """URLs of n stand-in processes (each on a free port) answering `answer`, as a `StandIns`
    (their pids and CPU too); stopped on exit.
    impl: "c" (instant_sglang.c: the driver, not the stand-in, is what a 2-core machine then
    measures), "python" (this file), or "auto" (C where a compiler is, else Python)."""
    if impl not in ("auto", "c", "python"):
        raise ValueError(f"impl must be auto, c or python, got {impl!r}")
    binary = c_binary() if impl in ("auto", "c") else None
    if impl == "c" and binary is None:
        raise RuntimeError("the C stand-in needs a C compiler (cc or gcc on PATH)")
    head = [str(binary)] if binary is not None else [sys.executable, __file__]
    procs, urls = [], []
    try:
        for _ in range(n):
            argv = [*head, "--port", "0", "--stop-id", str(stop_id)]
            argv += ["--tokens-per-turn", str(len(answer))]
            argv += ["--answer-ids", ",".join(map(str, answer[:-1] or answer))]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
        for proc in procs:
            line = proc.stdout.readline() if proc.stdout else ""
            if not line.startswith("ready "):
                raise RuntimeError(f"stand-in did not start (it printed {line!r})")
            urls.append(f"http://127.0.0.1:{int(line.split()[1])}")
        yield StandIns(urls, [p.pid for p in procs])
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-turn", type=int, default=32)
    parser.add_argument("--stop-id", type=int, default=2)
    parser.add_argument("--answer-ids", default="7", help="comma-separated ids an answer repeats")
    args = parser.parse_args(argv)
    pattern = [int(i) for i in args.answer_ids.split(",")]
    ids = (pattern * args.tokens_per_turn)[: args.tokens_per_turn - 1] + [args.stop_id]
    asyncio.run(serve(args.port, Answers(ids, args.stop_id)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
