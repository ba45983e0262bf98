"""Engine-side routed experts (MoE), SGLang 0.5.23's `return_routed_experts`: the LocalEngine's
returned routes equal the routers' top-k of a separate plain transformers forward over the same
tokens; a dense model and an engine built without the option refuse clearly.

The expected routes are recorded here with this file's own forward hooks on a fresh model, never
with the engine's recorder.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from gspo_agents.models import load_model
from gspo_agents.rollout.engine import EngineRequestError, SamplingParams
from gspo_agents.rollout.local_engine import LocalEngine


def reference_routes(model_dir: str, tokens: list[int]) -> torch.Tensor:
    """[positions, layers*k] of a plain full-sequence forward: each router's top-k, sorted."""
    model = load_model(model_dir, "float32").eval()
    k = model.config.num_experts_per_tok
    per_layer: list[torch.Tensor] = []

    def hook(module, inputs, output):
        logits = output[0]  # the router's logits over experts, [tokens, experts]
        per_layer.append(logits.topk(k, dim=-1).indices.sort(dim=-1).values)

    routers = [layer.mlp.gate for layer in model.model.layers]
    handles = [r.register_forward_hook(hook) for r in routers]
    with torch.no_grad():
        model(input_ids=torch.tensor([tokens]))
    for h in handles:
        h.remove()
    return torch.stack(per_layer, dim=1).reshape(len(tokens), -1).to(torch.int32)


def _generate_all(engine: LocalEngine, prompts, max_new: int, starts):
    async def go():
        sampling = SamplingParams(max_new_tokens=max_new, temperature=1.0, seed=7)
        calls = [
            engine.generate(p, sampling, f"r{i}", routed_experts_start_len=s, ignore_eos=True)
            for i, (p, s) in enumerate(zip(prompts, starts, strict=True))
        ]
        return await asyncio.gather(*calls)

    return asyncio.run(go())


def test_local_engine_routes_equal_a_separate_forwards_router_top_k(moe_dir):
    engine = LocalEngine(moe_dir, max_batch_size=8, return_routed_experts=True)
    # two identical prompts (one shared prefill row), a shorter one (left padding), a start > 0
    prompts = [[5, 9, 200, 17, 3, 44], [5, 9, 200, 17, 3, 44], [101, 7, 8], [60, 61, 62, 63]]
    starts = [0, 0, 0, 2]
    gens = _generate_all(engine, prompts, 6, starts)
    asyncio.run(engine.close())
    width = None
    for prompt, start, gen in zip(prompts, starts, gens, strict=True):
        tokens = prompt + gen.token_ids
        expected = reference_routes(moe_dir, tokens)[start : len(tokens) - 1]
        got = gen.routed_experts
        assert got is not None and got.dtype == torch.int32
        assert got.shape == expected.shape  # SGLang's span: [start, prompt + output - 1)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        width = got.shape[1]
    model = load_model(moe_dir, "float32")
    assert width == model.config.num_hidden_layers * model.config.num_experts_per_tok
    # meaningful: positions route differently, so a misaligned span would not match
    full = reference_routes(moe_dir, prompts[0] + gens[0].token_ids)
    assert not torch.equal(full[:-1], full[1:])


def test_routes_are_returned_only_when_asked(moe_dir):
    engine = LocalEngine(moe_dir, return_routed_experts=True)
    (gen,) = _generate_all(engine, [[5, 6, 7]], 3, [None])
    asyncio.run(engine.close())
    assert gen.routed_experts is None


def test_a_dense_model_refuses_to_return_routed_experts(dense_dir):
    with pytest.raises(ValueError, match="return_routed_experts needs a mixture-of-experts"):
        LocalEngine(dense_dir, return_routed_experts=True)


def test_asking_an_engine_built_without_the_option_is_a_request_error(moe_dir):
    engine = LocalEngine(moe_dir)
    with pytest.raises(EngineRequestError, match="without return_routed_experts"):
        _generate_all(engine, [[5, 6, 7]], 3, [0])
    asyncio.run(engine.close())


def test_engine_side_replay_is_checked_at_config_time_and_refused_at_engine_start(dense_dir):
    from test_config import compose_run

    from gspo_agents.components import build_engine
    from gspo_agents.config import check_choices

    with pytest.raises(ValueError, match="trainer, engine.*Did you mean 'engine'"):
        check_choices(compose_run("algorithm.routing_replay_source=engin"))
    with pytest.raises(ValueError, match="routing_replay=true"):
        check_choices(compose_run("algorithm.routing_replay_source=engine"))
    cfg = compose_run("algorithm.routing_replay=true", "algorithm.routing_replay_source=engine")
    check_choices(cfg)
    # the local engine on a dense model cannot return routes: refused when the engine is built
    with pytest.raises(ValueError, match="return_routed_experts needs a mixture-of-experts"):
        build_engine(cfg, dense_dir, seed=0)


def test_trajectory_routes_append_and_follow_rows_through_flatten_and_select():
    from gspo_agents.trajectory import Trajectory, flatten

    trajs = []
    for i in range(3):
        t = Trajectory(prompt_ids=[1, 2, 3])
        t.append_model([4 + i, 5], [-0.1, -0.2], 0)
        t.append_routes(torch.full((2, 4), i, dtype=torch.int32))  # the first request's span
        t.append_routes(torch.full((2, 4), 10 + i, dtype=torch.int32))
        trajs.append(t)
    assert trajs[1].num_routed_positions == 4
    with pytest.raises(ValueError, match="width 6"):
        trajs[0].append_routes(torch.zeros(1, 6, dtype=torch.int32))
    batch = flatten(trajs, [1.0, 0.0, -1.0], pad_id=0)
    picked = batch.select([2, 0])
    assert picked.engine_routes is not None
    assert [int(r[0, 0]) for r in picked.engine_routes] == [2, 0]
    assert [int(r[-1, 0]) for r in picked.engine_routes] == [12, 10]
    assert flatten([Trajectory(prompt_ids=[1, 2])], [0.0], pad_id=0).engine_routes is None
