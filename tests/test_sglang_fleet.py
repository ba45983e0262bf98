"""An engine fleet that takes no worker's word (issue 31), against `python -m gspo_agents.serve`,
which boots at weight version "default" as SGLang 0.5.23 does (server_args.weight_version).

Which test catches which finding (each was seen failing on the client before the fix):
- versions as SGLang writes them: the "default" span unit test and the in_place two-update test
  (the client tagged the boot tokens with the last span's version);
- aborts without routed experts under a pause: the routed-experts abort unit test (the client
  raised EngineError, a worker failure);
- starting weights before step 1: the sync_start_weights tests (the worker generated on its
  launch weights while the learner trained others).
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys

import pytest
import torch
from engine_helpers import (
    SERVER_ARGS,
    assert_learner_logprobs,
    free_port,
    launch_tiny,
    model_version,
    server_info,
    wait_steps,
)
from test_manager_support import perturbed_weights
from tiny_run import TINY_RUN

from gspo_agents.models import load_model
from gspo_agents.rollout.engine import SamplingParams
from gspo_agents.rollout.sglang_engine import SGLangEngine, StartWeightsMismatch
from gspo_agents.rollout.sglang_wire import parse_generation
from gspo_agents.rollout.sglang_workers import rank_workers
from gspo_agents.rollout.weight_group import bucket_by_bytes, read_hf_tensors
from gspo_agents.serve import launch

pytest_plugins = ["engine_fixtures"]

BUCKET_MB = 1.0  # the tiny model is ~3.6 MB: several buckets per update


def _answer(spans: list[dict], n: int, **meta) -> dict:
    pairs = [[-0.5, 7, None]] * n
    return {"meta_info": {"output_token_logprobs": pairs, "weight_versions": spans, **meta}}


def test_a_default_span_is_the_boot_weights_not_the_last_version():
    """0.5.23's own spans for a request that began on the boot weights and went on after an
    update: the first 5 tokens are the boot weights' (version 0 here), not version 1."""
    spans = [{"version": "default", "start": 0, "end": 5}, {"version": "1", "start": 5, "end": 9}]
    body = _answer(spans, 9, weight_version="1", finish_reason={"type": "length", "length": 9})
    gen = parse_generation(body, 1, 9, boot_version=0)
    assert gen.versions() == [0] * 5 + [1] * 4 and gen.weight_version == 1


def test_an_abort_without_routed_experts_is_a_retry_not_a_worker_failure():
    """0.5.23 answers a request a pause aborted in the waiting queue without routed_experts:
    the request comes back empty, to be sent again (the manager does so after any abort)."""
    abort = {"type": "abort", "message": "Abort before prefill"}
    body = _answer([{"version": "2", "start": 0, "end": 3}], 3, finish_reason=abort)
    gen = parse_generation(body, 2, 16, routes=(4, 0))
    assert gen.finish_reason == "abort" and gen.token_ids == [] and gen.routed_experts is None
    routes = base64.b64encode(torch.zeros(6, 4, dtype=torch.int32).numpy().tobytes()).decode()
    kept = parse_generation(
        {**body, "meta_info": {**body["meta_info"], "routed_experts": routes}}, 2, 16, routes=(4, 0)
    )
    assert len(kept.token_ids) == 3 and kept.routed_experts.shape == (6, 4)


async def _one_turn_across_two_updates(tiny_path, v1, v2, seed: int):
    """One long turn on a freshly booted worker with two in_place updates inside it; None when
    the turn ended by itself before the updates were done."""
    with launch_tiny(tiny_path) as server:
        assert await model_version(server.url) == "default"
        engine = SGLangEngine([server.url], pause_mode="in_place")
        sampling = SamplingParams(max_new_tokens=3000, temperature=1.0, seed=seed)
        try:
            long = asyncio.create_task(engine.generate([1, 7], sampling, "long"))
            await wait_steps(server.url, 3, long)
            for version, path in ((1, v1), (2, v2)):
                await engine.pause("in_place")
                await engine.update_weights(path, version)
                await engine.resume()
                await wait_steps(server.url, 3, long)
            if long.done():
                await long
                return None
            await engine.abort("long")
            return await long
        finally:
            await engine.close()


async def test_two_updates_inside_one_in_place_turn_keep_the_boot_tokens_at_the_start_version(
    tiny_path, tmp_path
):
    v1 = perturbed_weights(tiny_path, tmp_path / "v1", 0.2, seed=1)
    v2 = perturbed_weights(tiny_path, tmp_path / "v2", 0.2, seed=2)
    for attempt in range(4):  # a sampled stop token may end the turn before both updates
        gen = await _one_turn_across_two_updates(tiny_path, v1, v2, seed=attempt)
        if gen is not None:
            break
    else:
        pytest.fail("every turn ended (a sampled stop token) before the two updates")
    versions = gen.versions()
    assert versions[0] == 0 and versions == sorted(versions) and set(versions) == {0, 1, 2}


async def test_a_base_model_worker_gets_the_learners_starting_weights(tiny_path, tmp_path):
    """A cold-started learner starts from another directory than the worker was launched on:
    the worker is given it (as version 0) before anything is generated."""
    sft = perturbed_weights(tiny_path, tmp_path / "sft", 0.3, seed=5)
    with launch_tiny(tiny_path) as server:
        engine = SGLangEngine([server.url])
        try:
            assert await engine.sync_start_weights(tiny_path, 0) is False  # its own: kept
            assert await model_version(server.url) == "default"
            assert await engine.sync_start_weights(sft, 0) is True
            assert await model_version(server.url) == "0"
            gen = await engine.generate([1, 5, 6], SamplingParams(max_new_tokens=6), "g")
            assert gen.weight_version == 0
            assert_learner_logprobs(load_model(sft), [1, 5, 6], gen)
            with pytest.raises(StartWeightsMismatch, match="learner starts from /nonexistent"):
                await engine.sync_start_weights("/nonexistent/sft", 0)
        finally:
            await engine.close()


async def test_a_worker_killed_after_the_first_bucket_leaves_the_update_to_the_survivor(
    tiny_path, tmp_path
):
    """Two workers, NCCL mode over gloo; one process exits after it received bucket 1 of an
    update. The update completes on the survivor (the whole update sent again over a group of
    the survivor alone, the old group destroyed on both sides), the next update forms its
    group without the dead worker, and the restarted worker serves only after a full update."""
    v1 = perturbed_weights(tiny_path, tmp_path / "v1", 0.2, seed=1)
    v2 = perturbed_weights(tiny_path, tmp_path / "v2", 0.2, seed=2)
    n_tensors = len(read_hf_tensors(v1))
    first_bucket = len(bucket_by_bytes(read_hf_tensors(v1), int(BUCKET_MB * 2**20))[0])
    survivor = launch_tiny(tiny_path)
    port = free_port()
    doomed = launch(
        model_path=tiny_path, port=port, extra_args=[*SERVER_ARGS, "--die-after-buckets", "1"]
    )
    engine = SGLangEngine(
        [survivor.url, doomed.url],
        update_mode="nccl",
        update_bucket_mb=BUCKET_MB,
        down_cooldown_s=0,
    )
    restarted = None
    try:
        await engine.update_weights(v1, 1)
        assert engine.weight_version == 1 and list(engine.last_update_dropped) == [doomed.url]
        assert doomed.process.wait(timeout=60) == 1
        info = (await server_info(survivor.url))["stats"]
        assert info["tensors_received"] == first_bucket + n_tensors  # all of it again
        assert info["groups_destroyed"] == 1 and len(info["weight_groups"]) == 1
        assert await model_version(survivor.url) == "1"
        reference = load_model(v1)
        for i in range(6):
            gen = await engine.generate([1, 5, i + 2], SamplingParams(max_new_tokens=4), f"k{i}")
            assert gen.weight_version == 1
            assert_learner_logprobs(reference, [1, 5, i + 2], gen)
        groups = info["weight_groups"]
        await engine.update_weights(v2, 2)  # the survivor's group again: no wait for the dead
        info = (await server_info(survivor.url))["stats"]
        assert info["groups_destroyed"] == 1 and info["weight_groups"] == groups
        assert info["tensors_received"] == first_bucket + 2 * n_tensors
        restarted = launch_tiny(tiny_path, port)
        assert await model_version(restarted.url) == "default"
        assert await engine.worker_health() == {survivor.url: True, restarted.url: True}
        assert await model_version(restarted.url) == "2"  # a full reload before it serves
        key = next(
            k
            for k in map(str, range(100))
            if rank_workers(k, engine.worker_urls)[0] == restarted.url
        )
        gen = await engine.generate([1, 5, 6], SamplingParams(max_new_tokens=6), "r", route_key=key)
        assert gen.weight_version == 2
        assert_learner_logprobs(load_model(v2), [1, 5, 6], gen)
        assert (await server_info(restarted.url))["stats"]["requests"] == 1
    finally:
        await engine.close()
        for server in (survivor, doomed, restarted):
            if server is not None:
                server.stop()


@pytest.mark.slow
async def test_the_readme_sglang_command_on_a_fresh_base_model_worker_trains_as_local(tmp_path):
    """A new user's path (issue 31): `python -m gspo_agents.serve --model tiny`, then the
    README's engine=sglang command on a cold-started env. The learner starts from the SFT
    directory, the worker from the base model: the worker is given the SFT weights before
    step 1, which then matches engine=local (same seeds, same engine code) to the digit.
    Before the fix the worker sampled from the base model: ratio_max 1.144 vs 1.0000002."""

    def train(run_dir, *extra: str) -> dict:
        cmd = [sys.executable, "-m", "gspo_agents.train", f"trainer.run_dir={run_dir}"]
        proc = subprocess.run(
            [*cmd, *TINY_RUN, "trainer.steps=1", *extra],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        rows = (run_dir / "metrics.jsonl").read_text().splitlines()
        return {**json.loads(rows[0]), "stderr": proc.stderr}

    local = await asyncio.to_thread(train, tmp_path / "local")
    with launch(model="tiny", extra_args=SERVER_ARGS) as server:
        remote = await asyncio.to_thread(
            train, tmp_path / "sglang", "engine=sglang", f"engine.urls=[{server.url}]"
        )
        assert await model_version(server.url) == "1"
    keys = ("reward_mean", "loss", "trained_nothing", "rollout/weight_version", "ratio_max")
    seen = {k: (local.get(k), remote.get(k)) for k in keys}
    for key in keys:
        assert remote[key] == pytest.approx(local[key], rel=1e-5, abs=1e-7), seen
    assert "pushed them as version 0 before step 1" in remote["stderr"]
