"""The service caps every client-supplied limit and answers bad values with a JSON 400 naming the
field: never a plain-text 500, and never a run that ends in RE, MLE or SE because of the value.

Real HTTP against `python -m sandbox serve` (bubblewrap) in a subprocess.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sbtest_util import ISOLATING_BACKENDS
from test_sandbox_service import AB_PY, _start, _stop

from sandbox.service.server import ServiceConfig

CAPS = ServiceConfig()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    proc, base = _start("bubblewrap", "--max-concurrency", "2")
    try:
        yield base
    finally:
        _stop(proc)


def judge_body(**limits: Any) -> dict[str, Any]:
    return {
        "language": "python",
        "source": AB_PY,
        "tests": [{"stdin": "1 2", "expected": "3"}],
        "limits": limits,
    }


BAD_LIMITS = [
    ({"processes": 400}, "limits.processes"),
    ({"processes": 1.5}, "limits.processes"),
    ({"processes": 0}, "limits.processes"),
    ({"processes": True}, "limits.processes"),
    ({"output_bytes": 200_000_000}, "limits.output_bytes"),
    ({"output_bytes": 1e300}, "limits.output_bytes"),
    ({"output_bytes": "big"}, "limits.output_bytes"),
    ({"memory_mb": float("inf")}, "limits.memory_mb"),
    ({"memory_mb": float("nan")}, "limits.memory_mb"),
    ({"memory_mb": -5}, "limits.memory_mb"),
    ({"memory_mb": 1 << 40}, "limits.memory_mb"),
    ({"memory_mb": False}, "limits.memory_mb"),
    ({"time_s": 0}, "limits.time_s"),
    ({"time_s": 1e9}, "limits.time_s"),
    ({"time_s": float("-inf")}, "limits.time_s"),
    ({"time_s": [1]}, "limits.time_s"),
    ({"wall_time_s": 3601}, "limits.wall_time_s"),
    ({"cpu": 1}, "unknown field"),
]


def _post_raw(url: str, path: str, body: str) -> httpx.Response:
    # json.dumps would refuse NaN/Infinity with allow_nan=False; send them as Python writes them
    return httpx.post(
        url + path, content=body, headers={"content-type": "application/json"}, timeout=60
    )


@pytest.mark.parametrize(("limits", "field"), BAD_LIMITS)
def test_bad_limits_get_a_json_400_naming_the_field(
    url: str, limits: dict[str, Any], field: str
) -> None:
    reply = _post_raw(url, "/judge", json.dumps(judge_body(**limits)))
    assert reply.status_code == 400, reply.text
    assert field in reply.json()["error"], reply.json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"run_timeout": float("inf")}, "run_timeout"),
        ({"run_timeout": True}, "run_timeout"),
        ({"memory_limit_MB": 1e300}, "memory_limit_MB"),
        ({"memory_limit_MB": 1.5}, "memory_limit_MB"),
        ({"compile_timeout": float("nan")}, "compile_timeout"),
    ],
)
def test_bad_run_code_values_get_a_json_400(url: str, body: dict[str, Any], field: str) -> None:
    full = {"code": "print(1)", "language": "python", **body}
    reply = _post_raw(url, "/run_code", json.dumps(full))
    assert reply.status_code == 400, reply.text
    assert field in reply.json()["error"]


def test_bad_judge_tolerances_and_test_fields_name_the_field(url: str) -> None:
    body = judge_body()
    body["judge"] = {"mode": "float", "abs_tol": float("nan")}
    reply = _post_raw(url, "/judge", json.dumps(body))
    assert reply.status_code == 400 and "judge.abs_tol" in reply.json()["error"]
    body = judge_body()
    body["tests"] = [{"stdin": "1 2", "expected": "3"}, {"stdin": 5}]
    reply = _post_raw(url, "/judge", json.dumps(body))
    assert reply.status_code == 400 and "tests[1].stdin" in reply.json()["error"]


def test_total_output_is_capped_across_tests(url: str) -> None:
    body = judge_body(output_bytes=CAPS.max_output_bytes)
    body["tests"] = [{"stdin": "1 2", "expected": "3"}] * 100
    reply = httpx.post(url + "/judge", json=body, timeout=60)
    assert reply.status_code == 400 and "limits.output_bytes" in reply.json()["error"]


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_json_is_a_400_not_a_500(url: str, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    for path, body in (
        ("/judge", f'{{"language": "python", "source": "", "tests": {nested}}}'),
        ("/run_code", f'{{"code": "", "language": "python", "files": {nested}}}'),
        ("/judge", nested),
    ):
        reply = _post_raw(url, path, body)
        assert reply.status_code == 400, reply.text
        assert "error" in reply.json()


def test_deep_function_arguments_are_a_400(url: str) -> None:
    deep: Any = 1
    for _ in range(700):  # under the JSON parser's limit, over the codec's 500 levels
        deep = [deep]
    body = {
        "language": "python",
        "source": "def f(x): return 1",
        "function": "f",
        "tests": [{"args": [deep], "expected": 1}],
    }
    reply = httpx.post(url + "/judge", json=body, timeout=60)
    assert reply.status_code == 400 and "test 0" in reply.json()["error"], reply.text


def test_huge_bodies_get_a_json_413(url: str) -> None:
    body = '{"code": "' + "x" * (CAPS.max_body_bytes + 10) + '", "language": "python"}'
    reply = _post_raw(url, "/run_code", body)
    assert reply.status_code == 413 and "limit" in reply.json()["error"]


def test_limits_at_the_maxima_still_run(url: str) -> None:
    """The caps are not off by one: the documented maxima are accepted and the run is OK."""
    body = judge_body(
        processes=CAPS.max_processes,
        output_bytes=CAPS.max_output_bytes,
        memory_mb=512.0,
        time_s=2,
    )
    reply = httpx.post(url + "/judge", json=body, timeout=120)
    assert reply.status_code == 200 and reply.json()["verdict"] == "OK", reply.text


@pytest.mark.parametrize("backend", ISOLATING_BACKENDS)
def test_capped_limits_on_every_backend(backend: str) -> None:
    """The problem list's requests are refused before any backend runs them, and a request at
    the maxima runs correctly on each backend."""
    proc, base = _start(backend, "--max-concurrency", "1")
    try:
        for limits in ({"processes": 400}, {"output_bytes": 200_000_000}, {"memory_mb": 1e999}):
            reply = _post_raw(base, "/judge", json.dumps(judge_body(**limits)))
            assert reply.status_code == 400, (limits, reply.text)
        forks = (
            "import os, time\nkids = 0\n"
            "for _ in range(300):\n"
            "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            "    if pid == 0:\n        time.sleep(2); os._exit(0)\n    kids += 1\n"
            "print(kids)\n"
        )
        body = judge_body(processes=CAPS.max_processes, output_bytes=CAPS.max_output_bytes)
        body["source"], body["tests"] = forks, [{"stdin": ""}]
        reply = httpx.post(base + "/judge", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        test = reply.json()["tests"][0]
        assert test["verdict"] == "OK", test
        # the cap held (up to the few processes of the backend's own margin), not 300
        assert int(test["stdout"]) <= CAPS.max_processes + 4, test
    finally:
        _stop(proc)
