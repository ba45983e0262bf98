"""LoRA weight updates over SGLang's HTTP API, against the stand-in server (`gspo_agents.serve`),
which enforces SGLang 0.5.23's adapter rules (rollout/server_lora.py).

- workers launched with --enable-lora and a fitting pool get the adapter: /load_lora_adapter,
  /update_weight_version, then every /generate names it in `lora_path`; the tokens come with the
  merged model's log-probs at the new version;
- workers without --enable-lora get the merged weights from disk, with the same log-probs;
- the server refuses what SGLang refuses: adapters when LoRA is off, a taken name, a rank above
  --max-lora-rank, a /generate naming an adapter that is not loaded.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest
from engine_helpers import SERVER_ARGS, assert_learner_logprobs, model_version, tiny_model_path

from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.models import LORA_TARGETS, LoraConfig, load_model
from gspo_agents.rollout.engine import SamplingParams
from gspo_agents.rollout.sglang_engine import SGLangEngine
from gspo_agents.serve import launch

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

LORA_ARGS = ["--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", *LORA_TARGETS]
PROMPT = [5, 17, 42, 99, 7]


@pytest.fixture(scope="module")
def lora_export(tmp_path_factory) -> Path:
    """A LoRA learner's export after one update: merged weights + adapter/."""
    out = tmp_path_factory.mktemp("lora") / "step1"
    learner = Learner(tiny_model_path(), LearnerConfig(lr=3e-2, lora=LoraConfig(rank=4)))
    batch = synthetic_batch(0, batch_size=4)
    learner.update(with_old_logprobs(batch, learner.compute_logprobs(batch), 0.02, 0))
    learner.export_hf(str(out))
    assert (out / "adapter" / "adapter_config.json").is_file()
    return out


async def post(url: str, path: str, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(timeout=120.0) as c:
        return await c.post(url + path, json=body)


async def generate_after_update(url: str, export: Path) -> tuple:
    engine = SGLangEngine([url], pause_mode="abort")
    try:
        await engine.update_weights(str(export), version=1)
        sampling = SamplingParams(max_new_tokens=6, temperature=1.0, seed=3)
        gen = await engine.generate(PROMPT, sampling, "r1")
        return gen, engine._lora_name
    finally:
        await engine.close()


def test_lora_enabled_workers_take_the_adapter_and_generate_with_it(lora_export):
    with launch(model_path=tiny_model_path(), extra_args=[*SERVER_ARGS, *LORA_ARGS]) as server:
        gen, name = asyncio.run(generate_after_update(server.url, lora_export))
        assert name == "gspo-v1" and gen.weight_version == 1
        assert asyncio.run(model_version(server.url)) == "1"
        assert_learner_logprobs(load_model(str(lora_export)), PROMPT, gen)  # the merged model
        # SGLang's refusals
        again = {"lora_name": "gspo-v1", "lora_path": str(lora_export / "adapter")}
        resp = asyncio.run(post(server.url, "/load_lora_adapter", again))
        assert resp.status_code == 400 and "already exists" in resp.json()["error_message"]
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}, "lora_path": "x"}
        resp = asyncio.run(post(server.url, "/generate", body))
        assert resp.status_code == 400 and "are not loaded: x" in resp.text
        resp = asyncio.run(post(server.url, "/unload_lora_adapter", {"lora_name": "nope"}))
        assert resp.status_code == 400 and "does not exist" in resp.json()["error_message"]


def test_workers_without_lora_get_the_merged_weights(lora_export):
    with launch(model_path=tiny_model_path(), extra_args=SERVER_ARGS) as server:
        gen, name = asyncio.run(generate_after_update(server.url, lora_export))
        assert name is None and gen.weight_version == 1
        assert_learner_logprobs(load_model(str(lora_export)), PROMPT, gen)
        adapter = {"lora_name": "a", "lora_path": str(lora_export / "adapter")}
        resp = asyncio.run(post(server.url, "/load_lora_adapter", adapter))
        assert resp.status_code == 400 and "Please set `--enable-lora`" in resp.text


def test_an_adapter_above_the_pool_rank_is_refused_and_the_engine_sends_merged(lora_export):
    small = ["--enable-lora", "--max-lora-rank", "2", "--lora-target-modules", *LORA_TARGETS]
    with launch(model_path=tiny_model_path(), extra_args=[*SERVER_ARGS, *small]) as server:
        adapter = {"lora_name": "a", "lora_path": str(lora_export / "adapter")}
        resp = asyncio.run(post(server.url, "/load_lora_adapter", adapter))
        assert resp.status_code == 400 and "incompatible" in resp.json()["error_message"]
        gen, name = asyncio.run(generate_after_update(server.url, lora_export))
        assert name is None and gen.weight_version == 1  # merged weights from disk instead
