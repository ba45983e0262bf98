"""SGLangEngine's lazy start under many concurrent first calls (issue 33): one probe of the
workers, shared by every caller, and every caller let through at once when it ends. Behind a
lock the callers went on one per event-loop turn, so 1,024 episodes that start together reached
the engine over 1,024 turns and never ran 1,024 at once. Fast: a raw asyncio worker stand-in."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest

from gspo_agents.rollout.engine import EngineUnavailable, SamplingParams
from gspo_agents.rollout.sglang_engine import SGLangEngine

INFO = json.dumps({"weight_version": "default", "model_path": "stand-in"}).encode()
ANSWER = json.dumps(
    {
        "text": "",
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": 2},
            "weight_version": "default",
            "output_token_logprobs": [[-0.5, 7, None], [-0.25, 2, None]],
        },
    }
).encode()


class Worker:
    """HTTP/1.1 keep-alive; GET /server_info and /model_info after `probe_delay_s`, POST
    /generate at once, 404 else (no router paths). Counts requests per path."""

    def __init__(self, probe_delay_s: float = 0.0) -> None:
        self.delay = probe_delay_s
        self.seen: collections.Counter[str] = collections.Counter()

    async def __aenter__(self) -> Worker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
                path = head.split(" ", 2)[1]
                length = 0
                for line in head.split("\r\n"):
                    if line.startswith("content-length:"):
                        length = int(line.split(":")[1])
                await reader.readexactly(length)
                self.seen[path] += 1
                if path in ("/server_info", "/model_info"):
                    await asyncio.sleep(self.delay)
                    status, body = b"200 OK", INFO
                elif path == "/generate":
                    status, body = b"200 OK", ANSWER
                else:
                    status, body = b"404 Not Found", b'{"error":"not found"}'
                writer.write(
                    b"HTTP/1.1 %s\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_concurrent_first_calls_share_one_probe_and_all_go_on_in_the_same_loop_turn():
    loop = asyncio.get_running_loop()
    turns = 0

    def tick() -> None:  # counts event-loop turns while the callers wait
        nonlocal turns
        turns += 1
        if ticking:
            loop.call_soon(tick)

    ticking = True
    loop.call_soon(tick)
    async with Worker(probe_delay_s=0.05) as worker:
        engine = SGLangEngine([worker.url])
        try:

            async def first_call(i: int) -> int:
                await engine.start()
                return turns

            through = await asyncio.gather(*(first_call(i) for i in range(200)))
            ticking = False
            # One probe for 200 callers; then all 200 went on within one loop turn (behind a
            # lock: one per turn, 200 turns apart).
            assert worker.seen["/server_info"] == worker.seen["/model_info"] == 1
            assert max(through) - min(through) <= 1, (min(through), max(through))
            gens = await asyncio.gather(
                *(engine.generate([1, 2, 3], SamplingParams(4), f"r{i}") for i in range(20))
            )
            assert [g.token_ids for g in gens] == [[7, 2]] * 20
            assert worker.seen["/model_info"] == 1  # started: no probe per call
        finally:
            ticking = False
            await engine.close()


async def test_a_failed_probe_fails_every_waiting_caller_and_the_next_call_probes_again():
    async with Worker() as gone:
        url = gone.url  # nothing listens there once the block ends
    engine = SGLangEngine([url], connect_timeout_s=1.0, max_attempts=1)
    try:
        results = await asyncio.gather(
            *(engine.generate([1], SamplingParams(4), f"r{i}") for i in range(30)),
            return_exceptions=True,
        )
        assert all(isinstance(r, EngineUnavailable) for r in results), results[:3]
        assert not engine._started and engine._starting is None
        with pytest.raises(EngineUnavailable, match="no SGLang worker answered"):
            await engine.start()  # probed again, not the first probe's answer replayed
    finally:
        await engine.close()


async def test_a_cancelled_caller_does_not_cancel_the_probe_the_others_wait_on():
    async with Worker(probe_delay_s=0.1) as worker:
        engine = SGLangEngine([worker.url])
        try:
            first = asyncio.ensure_future(engine.start())
            second = asyncio.ensure_future(engine.start())
            await asyncio.sleep(0.02)
            first.cancel()
            await second  # still started by the probe the cancelled caller began
            assert first.cancelled() and engine._started
            assert worker.seen["/model_info"] == 1
        finally:
            await engine.close()
