"""`python -m gspo_agents.serve` over real HTTP: SGLang's JSON shapes and control semantics."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
import torch
from engine_helpers import TOL, launch_tiny, learner_logprobs, server_info, wait_steps

from gspo_agents.models import load_model

pytest_plugins = ["engine_fixtures"]


@pytest.fixture
async def client(server):
    async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(120.0)) as c:
        yield c


def gen_body(ids, max_new_tokens=8, rid=None, **sampling):
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 1.0, **sampling},
        "return_logprob": True,
        "logprob_start_len": -1,
    }
    if rid is not None:
        body["rid"] = rid
    return body


async def test_generate_has_sglang_shape_and_learner_logprobs(client, reference):
    prompt = [1, 30, 31, 32]
    resp = await client.post("/generate", json=gen_body(prompt, 10, rid="r-shape", temperature=0.7))
    assert resp.status_code == 200
    body = resp.json()
    meta = body["meta_info"]
    assert meta["id"] == "r-shape"
    assert isinstance(body["text"], str)
    triples = meta["output_token_logprobs"]
    assert all(len(t) == 3 and t[2] is None for t in triples)
    assert [t[1] for t in triples] == body["output_ids"]
    assert meta["completion_tokens"] == len(triples) and meta["prompt_tokens"] == len(prompt)
    assert meta["weight_version"] == "default"  # as SGLang 0.5.23 boots
    if meta["finish_reason"]["type"] == "length":
        assert meta["finish_reason"] == {"type": "length", "length": 10}
    expected = learner_logprobs(reference, prompt, body["output_ids"], 0.7)
    assert torch.allclose(torch.tensor([t[0] for t in triples]), expected, atol=TOL, rtol=0)


async def test_list_of_input_ids_is_a_batch_answered_in_order(client):
    resp = await client.post(
        "/generate", json=gen_body([[1, 2, 3], [1, 4], [1, 5, 6, 7]], 4, temperature=0)
    )
    batch = resp.json()
    assert isinstance(batch, list) and len(batch) == 3
    singles = [
        (await client.post("/generate", json=gen_body(p, 4, temperature=0))).json()
        for p in ([1, 2, 3], [1, 4], [1, 5, 6, 7])
    ]
    # temperature 0 is greedy (as in SGLang), so batch and single answers agree.
    assert [b["output_ids"] for b in batch] == [s["output_ids"] for s in singles]


async def test_concurrent_requests_are_batched(client, server):
    assert (await client.post("/pause_generation", json={"mode": "abort"})).status_code == 200
    before = (await server_info(server.url))["stats"]["requests"]
    tasks = [
        asyncio.create_task(client.post("/generate", json=gen_body([1, 9 + i], 3)))
        for i in range(32)
    ]
    while (await server_info(server.url))["stats"]["requests"] < before + 32:
        await asyncio.sleep(0.02)  # all 32 are queued behind the pause
    assert (await client.post("/continue_generation")).status_code == 200
    answers = await asyncio.gather(*tasks)
    assert all(a.status_code == 200 for a in answers)
    assert (await server_info(server.url))["stats"]["max_running"] >= 32


async def test_abort_by_rid_prefix_returns_partial_tokens_with_200(client, server):
    rid = uuid.uuid4().hex
    task = asyncio.create_task(client.post("/generate", json=gen_body([1, 77], 3000, rid=rid)))
    await wait_steps(server.url, 5, task)
    resp = await client.post("/abort_request", json={"rid": rid[:8]})
    assert resp.status_code == 200
    answer = await task
    assert answer.status_code == 200
    meta = answer.json()["meta_info"]
    if meta["finish_reason"]["type"] != "stop":  # a random model may emit eos first
        assert meta["finish_reason"]["type"] == "abort"
        assert 0 < len(meta["output_token_logprobs"]) < 3000


async def test_pause_aborts_in_flight_and_holds_new_until_continue(client, server):
    running = asyncio.create_task(client.post("/generate", json=gen_body([1, 88], 3000)))
    await wait_steps(server.url, 3, running)
    await client.post("/pause_generation", json={"mode": "abort"})
    aborted = (await running).json()["meta_info"]
    assert aborted["finish_reason"]["type"] in ("abort", "stop")
    held = asyncio.create_task(client.post("/generate", json=gen_body([1, 88], 3)))
    await asyncio.sleep(0.3)
    assert not held.done()
    await client.post("/continue_generation", json={})
    assert (await held).status_code == 200


async def test_client_disconnect_frees_the_request(server):
    # ignore_eos: a random model may sample eos early and answer before the client gives up
    async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(0.5)) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            await impatient.post("/generate", json=gen_body([1, 99], 3000, ignore_eos=True))
    for _ in range(500):
        if (await server_info(server.url))["num_live_requests"] == 0:
            break
        await asyncio.sleep(0.02)
    assert (await server_info(server.url))["num_live_requests"] == 0


async def test_update_weights_from_disk_sets_version_and_changes_logprobs(
    client, tiny_path, reference, tmp_path
):
    torch.manual_seed(1)
    new_model = load_model(tiny_path)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    new_model.save_pretrained(tmp_path)
    try:
        resp = await client.post(
            "/update_weights_from_disk",
            json={
                "model_path": str(tmp_path),
                "weight_version": "5",
                "flush_cache": True,
                "abort_all_requests": False,
                "load_format": None,
            },
        )
        assert resp.status_code == 200 and resp.json()["success"] is True
        info = (await client.get("/get_model_info")).json()
        assert info["weight_version"] == "5" and info["model_path"] == str(tmp_path)
        # As SGLang 0.5.23: server info holds the launch arguments, which an update leaves alone.
        assert (await client.get("/get_server_info")).json()["weight_version"] == "default"
        prompt = [1, 40, 50]
        body = (await client.post("/generate", json=gen_body(prompt, 8))).json()
        assert body["meta_info"]["weight_version"] == "5"
        got = torch.tensor([t[0] for t in body["meta_info"]["output_token_logprobs"]])
        assert torch.allclose(
            got, learner_logprobs(new_model, prompt, body["output_ids"]), atol=TOL
        )
        old = learner_logprobs(reference, prompt, body["output_ids"])
        assert not torch.allclose(got, old, atol=TOL)
    finally:  # later tests expect the original weights
        await client.post(
            "/update_weights_from_disk", json={"model_path": tiny_path, "weight_version": "0"}
        )


async def test_bad_requests_get_400_with_a_message(client, tmp_path):
    cases = [
        ("/generate", {"text": "hello"}, "input_ids"),
        ("/generate", gen_body([1, 2], 100_000), "context length"),
        ("/generate", gen_body([1, 2], 0), "max_new_tokens"),
        ("/update_weights_from_disk", {"model_path": str(tmp_path / "nope")}, "failed to load"),
        ("/update_weights_from_disk", {"model_path": "x", "weight_version": "v2"}, "integer"),
        ("/pause_generation", {"mode": "sideways"}, "in_place"),
        ("/abort_request", {}, "rid"),
    ]
    for path, body, needle in cases:
        resp = await client.post(path, json=body)
        assert resp.status_code == 400, (path, body, resp.text)
        assert needle in resp.json()["error"]["message"], resp.text


async def test_health_info_and_flush(client):
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/health_generate")).status_code == 200
    assert (await client.post("/flush_cache")).status_code == 200
    info = (await client.get("/server_info")).json()
    assert info["context_length"] > 0 and info["tp_size"] == 1


async def test_update_sessions_are_enforced_as_in_sglang_0_5_23(client):
    """weight_updater.py: no tensor update outside a session, one session at a time."""
    body = {"names": ["model.norm.weight"], "dtypes": ["float32"], "shapes": [[64]]}
    resp = await client.post("/update_weights_from_distributed", json=body)
    assert resp.status_code == 400 and "begin_weight_update" in resp.json()["message"]
    resp = await client.post("/end_weight_update", json={})
    assert resp.status_code == 400 and "no weight-update session" in resp.json()["message"]
    assert (await client.post("/begin_weight_update", json={})).status_code == 200
    try:
        resp = await client.post("/begin_weight_update", json={})
        assert resp.status_code == 400 and "already open" in resp.json()["message"]
    finally:
        assert (await client.post("/end_weight_update", json={})).status_code == 200


async def test_flush_is_refused_while_requests_run_unless_retracted(client, server):
    """scheduler.flush_cache: only when idle, the waiting queue ignored while paused."""
    rid = uuid.uuid4().hex
    body = gen_body([1, 9], 3000, rid=rid, ignore_eos=True)
    long = asyncio.create_task(client.post("/generate", json=body))
    try:
        await wait_steps(server.url, 2, long)
        assert not long.done()
        codes = [(await client.post("/flush_cache")).status_code]
        for mode in ("in_place", "retract"):
            await client.post("/pause_generation", json={"mode": mode})
            codes.append((await client.post("/flush_cache")).status_code)
            await client.post("/continue_generation", json={})
        assert codes == [400, 400, 200]
    finally:
        await client.post("/abort_request", json={"rid": rid})
        await long
    assert (await client.post("/flush_cache")).status_code == 200


@pytest.mark.slow  # a server of its own (~7 s); the fast tier keeps the shared one's tests
def test_ctrl_c_stops_the_server_quietly_and_stop_removes_its_log(tiny_path):
    """Ctrl-C is uvicorn's graceful shutdown: exit 130 and no traceback in the log; the log
    file `launch` made is removed once the server is stopped (none left behind in /tmp)."""
    import os
    import signal

    srv = launch_tiny(tiny_path)
    try:
        srv.process.send_signal(signal.SIGINT)
        assert srv.process.wait(30) == 130
        log = srv.log_tail(20000)
        assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    finally:
        srv.stop()
    assert not os.path.exists(srv.log_path)
