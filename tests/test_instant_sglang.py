"""benchmarks/instant_sglang.c answers what benchmarks/instant_sglang.py answers, byte for byte:
the C stand-in the driving benchmarks run where a compiler is must not measure another wire."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from instant_sglang import launch  # noqa: E402

ANSWER, STOP = [11, 12, 13, 14, 2], 2


def _body(n: int | None, history: int = 3) -> bytes:
    sampling = {} if n is None else {"max_new_tokens": n, "temperature": 1.0}
    return json.dumps(
        {"input_ids": list(range(history)), "sampling_params": sampling, "rid": "r" * 32},
        separators=(",", ":"),
    ).encode()


def _post(path: str, body: bytes = b"") -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (path.encode(), len(body))
    ) + body


REQUESTS = [
    _post("/generate", _body(4)),  # fewer than the answer: no forced stop ("length")
    _post("/generate", _body(5)),
    # Content-Length as the head's last line (as curl sends it): the Python stand-in once cut
    # its last digit there.
    b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(_body(6)) + _body(6),
    _post("/generate", _body(12)),  # longer: the answer repeats, the last id the stop id
    _post("/generate", _body(None)),  # no max_new_tokens: the whole answer
    _post("/generate", _body(3, history=40_000)),  # a 200 KB history, read in many pieces
    b"GET /server_info HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /model_info?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    _post("/abort_request", b'{"rid":"r"}'),
    b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n",
]


def _answers(url: str) -> list[bytes]:
    """Every request on one keep-alive connection, the last two written in one send."""
    host, port = url.removeprefix("http://").split(":")
    got = []
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        reader = sock.makefile("rb")
        batches = [[r] for r in REQUESTS[:-2]] + [REQUESTS[-2:]]
        for batch in batches:
            sock.sendall(b"".join(batch))
            for _ in batch:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    head += reader.read(1)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                got.append(head + reader.read(length))
    return got


def test_the_c_stand_in_answers_the_python_ones_bytes():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the benchmarks fall back to the Python stand-in")
    with (
        launch(1, ANSWER, STOP, impl="python") as (py_url,),
        launch(1, ANSWER, STOP, impl="c") as (c_url,),
    ):
        python, c = _answers(py_url), _answers(c_url)
    assert c == python
    meta = json.loads(python[3].split(b"\r\n\r\n", 1)[1])["meta_info"]
    assert [t[1] for t in meta["output_token_logprobs"]] == [11, 12, 13, 14, 2, 11, 12, 13] + [
        14,
        2,
        11,
        2,
    ]
    assert meta["finish_reason"] == {"type": "stop"}
    assert b"length" in python[0] and b"404" in python[-1].split(b"\r\n")[0]
    six = json.loads(python[2].split(b"\r\n\r\n", 1)[1])["meta_info"]["output_token_logprobs"]
    assert len(six) == 6
