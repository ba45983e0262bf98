"""Every request body SGLangEngine sends is one SGLang 0.5.23 accepts, checked with SGLang's own
request classes (sglang.srt.managers.io_struct), pinned in scripts/sglang_conformance.txt.

The client runs a scenario against `python -m gspo_agents.serve` over real HTTP while an httpx
hook records each POST body: generate (plain; seeded with stop ids, top-p and top-k), abort by
id, abort all, pause/continue, flush, update from disk, weight-group init and distributed update
(gloo here, the NCCL protocol otherwise), plus the pause bodies of the modes our server does not
run ("retract", "in_place"). The client always asks for log-probs, so every /generate body has
return_logprob true. tests/sglang_io_check.py validates them in a subprocess, with the pinned
sglang (installed outside this environment by scripts/setup_sglang_conformance.sh; the CI
installs it) on its path. Without it the test skips, and fails under CI=true.

Behaviour, not only shapes: the second test replays the client's control requests of two
bucketed NCCL-mode updates under an in_place pause (with a request running) through SGLang's own
SchedulerWeightUpdaterManager (the update-session gate and the flush-while-running rule) and
its version-span functions (tests/sglang_control_check.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from engine_helpers import free_port, launch_tiny, wait_steps
from sglang_dir import conformance_dir
from test_sglang_parity import _perturbed_state

from gspo_agents.rollout.engine import SamplingParams
from gspo_agents.rollout.sglang_engine import SGLangEngine
from gspo_agents.rollout.sglang_wire import parse_generation, pause_body
from gspo_agents.rollout.weight_group import read_hf_tensors

pytest_plugins = ["engine_fixtures"]

PINNED = "0.5.23"
CHECKER = Path(__file__).with_name("sglang_io_check.py")
EXPECTED = {
    "/generate",
    "/abort_request",
    "/pause_generation",
    "/continue_generation",
    "/flush_cache",
    "/update_weights_from_disk",
    "/init_weights_update_group",
    "/update_weights_from_distributed",
    "/begin_weight_update",
    "/end_weight_update",
    "/destroy_weights_update_group",  # at close (issue 31)
}


async def record_scenario(server, tiny_path: str) -> list[dict]:
    records: list[dict] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST":
            body = json.loads(request.content) if request.content else None
            records.append({"path": request.url.path, "body": body})

    def record_generate(url: str, body: bytes) -> None:  # /generate has its own client
        records.append({"path": "/generate", "body": json.loads(body)})

    eng = SGLangEngine([server.url])
    eng._http.client.event_hooks["request"].append(record)
    eng._gen.on_request.append(record_generate)
    try:
        await eng.generate([1, 5, 6], SamplingParams(max_new_tokens=3), "plain")
        seeded = SamplingParams(
            max_new_tokens=3, temperature=0.7, top_p=0.9, top_k=20, stop_token_ids=(2, 3), seed=11
        )
        await eng.generate([1, 5, 6], seeded, "seeded")
        long = asyncio.create_task(
            eng.generate([1, 7], SamplingParams(max_new_tokens=3000), "to-abort")
        )
        await wait_steps(server.url, 3, long)
        await eng.abort("to-abort")
        await long
        await eng.abort()
        await eng.pause()
        await eng.resume()
        await eng.flush_cache()
        await eng.update_weights(tiny_path, 1)
        await eng.init_weights_update_group(
            "127.0.0.1", free_port(), group_name="conformance", backend="gloo", timeout_s=60
        )
        named = _perturbed_state(tiny_path, 9)
        await eng.update_weights_from_distributed(named, 2, group_name="conformance")
    finally:
        await eng.update_weights(tiny_path, 0)
        await eng.close()
    records += [
        {"path": "/pause_generation", "body": pause_body(m)} for m in ("retract", "in_place")
    ]
    return records


@pytest.mark.slow
async def test_every_request_body_validates_with_sglangs_request_classes(
    server, tiny_path, reference, tmp_path
):
    site = conformance_dir()
    records = await record_scenario(server, tiny_path)
    assert {r["path"] for r in records} == EXPECTED
    # A control the checker must reject: a misspelt sampling key SGLang would not accept.
    typo = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "seeed": 1}}
    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps([*records, {"path": "/generate", "body": typo}]))
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(CHECKER), str(bodies), str(reference.config.vocab_size)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sglang"] == PINNED
    errors = result["errors"]
    assert [e["body"] for e in errors] == [typo], errors  # only the control fails
    assert "seeed" in errors[0]["error"]
    assert set(result["checked"]) == EXPECTED
    assert result["checked"]["/generate"] == sum(r["path"] == "/generate" for r in records)


CONTROL_CHECKER = Path(__file__).with_name("sglang_control_check.py")


async def record_updates_in_place(url: str, tiny_path: str) -> tuple[list[dict], list[dict]]:
    """Two bucketed NCCL-mode updates (gloo here) under an in_place pause while a long request
    runs: the client's control requests, each with the number of requests the server held then,
    and the long request's answer (its tokens span three versions)."""
    requests: list[dict] = []
    probe = httpx.AsyncClient(timeout=30)

    async def record(request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path != "/generate":
            live = (await probe.get(url + "/server_info")).json()["num_live_requests"]
            body = json.loads(request.content) if request.content else None
            requests.append({"path": request.url.path, "body": body, "live": live})

    eng = SGLangEngine([url], update_mode="nccl", pause_mode="in_place", update_bucket_mb=1.0)
    eng._http.client.event_hooks["request"].append(record)
    rid = uuid.uuid4().hex
    body = {
        "input_ids": [1, 7],
        "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True},
        "return_logprob": True,
        "rid": rid,
    }
    try:
        async with httpx.AsyncClient(timeout=None) as client:
            long = asyncio.create_task(client.post(url + "/generate", json=body))
            await wait_steps(url, 3, long)
            for version in (1, 2):
                await eng.update_weights(tiny_path, version)
                await wait_steps(url, 3, long)
            await client.post(url + "/abort_request", json={"rid": rid})
            answer = (await long).json()
    finally:
        await eng.close()
        await probe.aclose()
    return requests, [answer]


@pytest.mark.slow
async def test_update_sessions_flushes_and_version_spans_pass_sglangs_own_control_plane(
    tiny_path, tmp_path
):
    """The client's real requests, replayed through SGLang 0.5.23's SchedulerWeightUpdaterManager
    (session gate, flush rule) and its version-span functions (tests/sglang_control_check.py)."""
    site = conformance_dir()
    with launch_tiny(tiny_path) as server:
        requests, answers = await record_updates_in_place(server.url, tiny_path)
    n_tensors = len(read_hf_tensors(tiny_path))
    # SGLang drops empty spans (two updates with no token between): the client must read that.
    gapped = {"version": "1", "start": 4, "end": 4}
    synthetic = json.loads(json.dumps(answers[0]))
    spans = synthetic["meta_info"]["weight_versions"]
    spans.insert(1, {**gapped, "start": spans[0]["end"], "end": spans[0]["end"]})
    # Controls SGLang must refuse: the same requests without the session (the client before
    # issue 23), and with flush_cache asked while the in_place pause keeps a request running.
    sessionless = [
        r for r in requests if r["path"] not in ("/begin_weight_update", "/end_weight_update")
    ]
    flushing = [
        {**r, "body": {**r["body"], "flush_cache": True}}
        if r["path"] == "/update_weights_from_distributed"
        else r
        for r in requests
    ]
    controls = {"sessionless": sessionless, "flushing": flushing}
    path = tmp_path / "control.json"
    path.write_text(
        json.dumps({"requests": requests, "answers": [*answers, synthetic], "controls": controls})
    )
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(CONTROL_CHECKER), str(path)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{CHECKER.parent}"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sglang"] == PINNED
    failures = [c for c in result["calls"] if not c["success"]]
    assert failures == [], failures  # e.g. no session, or a flush refused while running
    paths = [c["path"] for c in result["calls"]]
    n_buckets = paths.count("/update_weights_from_distributed") // 2
    session = ["/begin_weight_update", *["/update_weights_from_distributed"] * n_buckets]
    assert n_buckets > 1 and paths == [*session, "/end_weight_update"] * 2
    assert len(result["received"]) == 2 * n_tensors and result["version"] == "2"
    refused = result["controls"]["sessionless"]
    assert refused and not any(c["success"] for c in refused)
    assert "begin_weight_update" in refused[0]["message"]
    flushed = [c for c in result["controls"]["flushing"] if not c["success"]]
    assert flushed and all("not flushed" in c["message"] for c in flushed)
    ours, sglang = result["spans"][0]["ours"], result["spans"][0]["sglang"]
    assert [s["version"] for s in ours] == ["default", "1", "2"]  # booted as 0.5.23 boots
    assert sglang["weight_versions"] == ours and sglang["weight_version"] == "2"
    for case in result["spans"]:  # the client reads SGLang's own meta_info
        meta = {**answers[0]["meta_info"], **case["sglang"]}
        gen = parse_generation({"meta_info": meta}, 0, 3000)
        versions = [0 if s["version"] == "default" else int(s["version"]) for s in ours]
        expected = [v for v, s in zip(versions, ours) for _ in range(s["end"] - s["start"])]
        assert gen.versions() == expected
