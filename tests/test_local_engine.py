"""LocalEngine: batched sampling whose log-probs equal the learner's full-forward log-probs."""

from __future__ import annotations

import asyncio

import pytest
import torch

from gspo_agents.logprobs import token_logprobs
from gspo_agents.models import ModelConfig, load_model, resolve_model
from gspo_agents.rollout.engine import Engine, EngineRequestError, SamplingParams
from gspo_agents.rollout.local_batch import new_cache
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.local_forward import Qwen3Forward
from gspo_agents.rollout.local_runner import detect_cache_kwarg
from gspo_agents.trajectory import Trajectory

TOL = 1e-4


@pytest.fixture(scope="module")
def tiny_path() -> str:
    return resolve_model(ModelConfig(name="tiny"))


@pytest.fixture(scope="module")
def reference(tiny_path):
    return load_model(tiny_path)


@pytest.fixture
async def engine(tiny_path):
    eng = LocalEngine(tiny_path, max_batch_size=64, seed=0)
    yield eng
    await eng.close()


def learner_logprobs(
    model, prompt: list[int], tokens: list[int], temperature: float
) -> torch.Tensor:
    """What the learner computes: one unpadded full forward, then token_logprobs."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits
    return token_logprobs(logits, ids, temperature)[0, len(prompt) :]


def prompts(n: int) -> list[list[int]]:
    # Different lengths, so the batch is left-padded.
    return [[1] + [(7 * i + 3 * j) % 1000 + 3 for j in range(2 + (i * 5) % 17)] for i in range(n)]


def assert_matches_learner(model, prompt, generation, temperature):
    expected = learner_logprobs(model, prompt, generation.token_ids, temperature)
    got = torch.tensor(generation.logprobs)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=TOL, rtol=0), (got - expected).abs().max()


async def test_engine_implements_the_protocol(engine):
    assert isinstance(engine, Engine)
    assert engine.weight_version == 0
    assert await engine.health()


async def test_single_request_logprobs_equal_learner_logprobs(engine, reference):
    prompt = [1, 50, 60, 70]
    gen = await engine.generate(prompt, SamplingParams(max_new_tokens=20, seed=3), "one")
    assert gen.finish_reason in ("stop", "length") and gen.weight_version == 0
    assert len(gen.token_ids) == len(gen.logprobs) > 0
    assert_matches_learner(reference, prompt, gen, 1.0)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
async def test_concurrent_padded_batch_logprobs_equal_learner_logprobs(
    engine, reference, temperature
):
    ps = prompts(24)
    sampling = SamplingParams(max_new_tokens=16, temperature=temperature)
    gens = await asyncio.gather(
        *(engine.generate(p, sampling, f"t{temperature}-{i}") for i, p in enumerate(ps))
    )
    assert engine.stats.max_running > 1  # they ran as a batch
    for p, g in zip(ps, gens, strict=True):
        assert_matches_learner(reference, p, g, temperature)


async def test_requests_joining_a_running_batch_keep_exact_logprobs(engine, reference):
    ps = prompts(12)
    first = [
        asyncio.create_task(engine.generate(p, SamplingParams(max_new_tokens=30), f"a{i}"))
        for i, p in enumerate(ps[:6])
    ]
    while engine.stats.forward_steps < 4:
        await asyncio.sleep(0.005)
    later = [
        engine.generate(p, SamplingParams(max_new_tokens=10), f"b{i}") for i, p in enumerate(ps[6:])
    ]
    gens = await asyncio.gather(*first, *later)
    for p, g in zip(ps, gens, strict=True):
        assert_matches_learner(reference, p, g, 1.0)


async def test_concurrent_requests_are_batched(engine):
    await engine.pause()  # hold them so they are admitted together
    tasks = [
        asyncio.create_task(engine.generate(p, SamplingParams(max_new_tokens=4), f"c{i}"))
        for i, p in enumerate(prompts(48))
    ]
    await asyncio.sleep(0.05)
    assert not any(t.done() for t in tasks)  # paused: new requests wait, they do not fail
    await engine.resume()
    gens = await asyncio.gather(*tasks)
    assert engine.stats.max_running == 48
    assert all(g.finish_reason in ("stop", "length") for g in gens)


async def test_top_k_1_is_greedy_and_still_reports_full_support_logprobs(engine, reference):
    prompt = [1, 11, 12, 13]
    gen = await engine.generate(prompt, SamplingParams(max_new_tokens=8, top_k=1), "greedy")
    ids = torch.tensor([prompt + gen.token_ids])
    with torch.no_grad():
        logits = reference(ids).logits[0, len(prompt) - 1 : -1]
    assert gen.token_ids == logits.argmax(-1).tolist()
    assert_matches_learner(reference, prompt, gen, 1.0)
    assert max(gen.logprobs) < 0  # log_softmax before filtering, not the filtered 0


async def test_stop_token_ends_with_stop_and_is_kept(engine):
    prompt = [1, 11, 12, 13]
    greedy = await engine.generate(prompt, SamplingParams(max_new_tokens=3, top_k=1), "g")
    stop_id = greedy.token_ids[1]
    gen = await engine.generate(
        prompt, SamplingParams(max_new_tokens=50, top_k=1, stop_token_ids=(stop_id,)), "s"
    )
    assert gen.finish_reason == "stop"
    assert gen.token_ids[-1] == stop_id and gen.meta["matched"] == stop_id
    assert len(gen.token_ids) <= 2


async def test_seeded_requests_repeat(engine):
    sampling = SamplingParams(max_new_tokens=12, seed=1234)
    a = await engine.generate([1, 2, 3], sampling, "x1")
    b = await engine.generate([1, 2, 3], sampling, "x2")
    assert a.token_ids == b.token_ids


async def wait_for_steps(engine, steps: int) -> None:
    start = engine.stats.forward_steps
    while engine.stats.forward_steps < start + steps:
        await asyncio.sleep(0.005)


async def test_abort_returns_tokens_so_far(engine, reference):
    prompt = [1, 40, 41]
    task = asyncio.create_task(engine.generate(prompt, SamplingParams(max_new_tokens=3000), "long"))
    await wait_for_steps(engine, 5)
    await engine.abort("long")
    gen = await task
    if gen.finish_reason != "stop":  # a random model may emit eos early
        assert gen.finish_reason == "abort"
        assert 0 < len(gen.token_ids) < 3000
    assert_matches_learner(reference, prompt, gen, 1.0)


async def test_abort_all_and_abort_of_unknown_id(engine):
    tasks = [
        asyncio.create_task(
            engine.generate([1, 5], SamplingParams(max_new_tokens=3000, stop_token_ids=()), f"L{i}")
        )
        for i in range(3)
    ]
    await wait_for_steps(engine, 3)
    await engine.abort("no-such-request")
    await engine.abort(None)
    gens = await asyncio.gather(*tasks)
    assert {g.finish_reason for g in gens} <= {"abort", "stop"}


async def test_pause_aborts_in_flight_and_holds_new_requests_until_resume(engine):
    running = asyncio.create_task(
        engine.generate([1, 9], SamplingParams(max_new_tokens=3000), "p1")
    )
    await wait_for_steps(engine, 3)
    await engine.pause()
    gen = await asyncio.wait_for(running, timeout=30)
    assert gen.finish_reason in ("abort", "stop")
    held = asyncio.create_task(engine.generate([1, 9], SamplingParams(max_new_tokens=5), "p2"))
    await asyncio.sleep(0.1)
    assert not held.done()
    await engine.resume()
    assert (await asyncio.wait_for(held, timeout=30)).finish_reason in ("length", "stop")


async def test_cancelled_generate_frees_its_slot(engine):
    task = asyncio.create_task(engine.generate([1, 3], SamplingParams(max_new_tokens=3000), "gone"))
    await wait_for_steps(engine, 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(2000):
        if engine._running == 0 and not engine._live:
            break
        await asyncio.sleep(0.005)
    assert engine._running == 0 and not engine._live
    # The engine keeps serving, and the id can be reused.
    assert (await engine.generate([1, 3], SamplingParams(max_new_tokens=2), "gone")).token_ids


async def test_update_weights_changes_version_and_logprobs(engine, reference, tmp_path):
    torch.manual_seed(0)
    new_model = load_model(engine.model_path)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    new_model.save_pretrained(tmp_path)

    prompt = [1, 20, 21, 22]
    await engine.pause()
    await engine.update_weights(str(tmp_path), version=7)
    await engine.resume()
    assert engine.weight_version == 7
    gens = await asyncio.gather(
        *(
            engine.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.8), f"u{i}")
            for i in range(4)
        )
    )
    for g in gens:
        assert g.weight_version == 7
        assert_matches_learner(new_model, prompt, g, 0.8)
    old = learner_logprobs(reference, prompt, gens[0].token_ids, 0.8)
    assert not torch.allclose(torch.tensor(gens[0].logprobs), old, atol=TOL)


async def test_update_weights_waits_for_running_requests(engine, reference, tmp_path):
    new_model = load_model(engine.model_path)
    with torch.no_grad():
        for p in new_model.parameters():
            p.mul_(1.5)
    new_model.save_pretrained(tmp_path)
    prompt = [1, 4]
    running = asyncio.create_task(engine.generate(prompt, SamplingParams(max_new_tokens=40), "w"))
    await wait_for_steps(engine, 2)
    await engine.update_weights(str(tmp_path), version=3)
    gen = await running
    # Every token came from the old weights: the swap waited for the request to finish.
    assert gen.weight_version == 0 and engine.weight_version == 3
    assert_matches_learner(reference, prompt, gen, 1.0)


async def test_bad_requests_are_rejected_clearly(engine):
    with pytest.raises(EngineRequestError, match="context length"):
        await engine.generate([1] * 10, SamplingParams(max_new_tokens=engine.context_length), "big")
    with pytest.raises(EngineRequestError, match="empty"):
        await engine.generate([], SamplingParams(max_new_tokens=1), "empty")
    with pytest.raises(EngineRequestError, match="outside"):
        await engine.generate([engine.vocab_size], SamplingParams(max_new_tokens=1), "oov")


async def test_moe_engine_logprobs_equal_learner_logprobs():
    path = resolve_model(ModelConfig(name="tiny-moe"))
    eng = LocalEngine(path)
    try:
        ps = prompts(8)
        gens = await asyncio.gather(
            *(
                eng.generate(p, SamplingParams(max_new_tokens=10, temperature=0.9), f"m{i}")
                for i, p in enumerate(ps)
            )
        )
    finally:
        await eng.close()
    ref = load_model(path)
    for p, g in zip(ps, gens, strict=True):
        assert_matches_learner(ref, p, g, 0.9)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_engine_logprobs_equal_the_learners_on_multi_turn_trajectories(
    engine, tiny_path, temperature
):
    """The Done-when of F1: engine log-probs == Learner.compute_logprobs, within 1e-4 in fp32,
    on right-padded multi-turn trajectories (env segments between model turns)."""
    from gspo_agents.learner import Learner, LearnerConfig
    from gspo_agents.trajectory import flatten

    sampling = SamplingParams(max_new_tokens=10, temperature=temperature)
    trajs = []
    for i, prompt in enumerate(prompts(6)):
        traj = Trajectory(prompt_ids=prompt)
        for turn in range(2):  # generate → env observation → generate, ids appended
            gen = await engine.generate(traj.token_ids, sampling, f"mt{i}-{turn}")
            traj.append_model(gen.token_ids, gen.logprobs, gen.weight_version)
            traj.close_turn()
            if turn == 0:
                traj.append_env([1, 300 + i, 301, 2])
        trajs.append(traj)
    learner = Learner(tiny_path, LearnerConfig(temperature=temperature, micro_batch_tokens=64))
    try:
        batch = flatten(trajs, [0.0] * len(trajs), learner.pad_token_id)
        learner_BT = learner.compute_logprobs(batch)
    finally:
        learner.close()
    mask = batch.loss_mask_BT.bool()
    assert int(mask.sum()) == sum(t.num_model_tokens for t in trajs) > 0
    gap = (learner_BT[mask] - batch.old_logprobs_BT[mask]).abs().max().item()
    assert gap < TOL, gap


async def test_a_seeded_request_samples_the_same_tokens_alone_or_in_any_batch(engine):
    sampling = SamplingParams(max_new_tokens=20, seed=77, stop_token_ids=())
    prompt = [1, 30, 31, 32, 33]
    alone = await engine.generate(prompt, sampling, "alone", ignore_eos=True)
    others = [
        engine.generate(p, SamplingParams(max_new_tokens=9 + i % 7), f"o{i}")
        for i, p in enumerate(prompts(16))
    ]
    crowd = await asyncio.gather(
        *others[:9], engine.generate(prompt, sampling, "crowd", ignore_eos=True), *others[9:]
    )
    assert engine.stats.max_running > 1
    assert crowd[9].token_ids == alone.token_ids and len(alone.token_ids) == 20


async def test_identical_prompts_share_one_prefill_and_keep_exact_logprobs(engine, reference):
    """The G samples of a task arrive with one prompt: it is prefilled once, and each sample
    still gets its own tokens and exact log-probs."""
    ps = prompts(4)
    batch = [ps[0]] * 8 + [ps[1]] * 4 + ps[2:]
    await engine.pause()
    tasks = [
        asyncio.create_task(
            engine.generate(p, SamplingParams(max_new_tokens=12, temperature=0.9), f"g{i}")
        )
        for i, p in enumerate(batch)
    ]
    await asyncio.sleep(0.05)
    before = engine.stats.prefill_rows
    await engine.resume()
    gens = await asyncio.gather(*tasks)
    assert engine.stats.prefill_rows - before == 4
    assert len({tuple(g.token_ids) for g in gens[:8]}) > 1  # samples differ
    for p, g in zip(batch, gens, strict=True):
        assert_matches_learner(reference, p, g, 0.9)


def test_qwen3_fast_forward_equals_the_transformers_forward(reference):
    """Prefill of a left-padded batch, then decode steps: same logits as transformers' own
    forward (with its DynamicCache), to float rounding."""
    from transformers import DynamicCache

    fast = Qwen3Forward.for_model(reference)
    assert fast is not None
    ps = prompts(6)
    length = max(len(p) for p in ps)
    ids = torch.tensor([[0] * (length - len(p)) + p for p in ps])
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in ps])
    ours, theirs = new_cache(reference.config), DynamicCache(config=reference.config)
    cache_kwarg = detect_cache_kwarg(reference)
    with torch.inference_mode():
        for step in range(4):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1] :]
            got = fast(ids, mask, positions, ours)
            want = reference(
                input_ids=ids, attention_mask=mask, position_ids=positions, **{cache_kwarg: theirs}
            ).logits[:, -1]
            assert torch.allclose(got, want, atol=1e-5, rtol=0), (step, (got - want).abs().max())
            ids = torch.argmax(want, -1, keepdim=True)
            mask = torch.cat([mask, torch.ones(len(ps), 1, dtype=torch.long)], 1)


def test_fast_forward_is_used_for_plain_qwen3_only(tiny_path, reference):
    assert Qwen3Forward.for_model(reference) is not None
    assert Qwen3Forward.for_model(load_model(resolve_model(ModelConfig(name="tiny-moe")))) is None


async def test_rows_keep_exact_logprobs_after_a_long_prompt_leaves_and_padding_is_dropped(
    engine, reference
):
    """A long prompt pads every short row; when it finishes, the all-padding columns are cut
    from the cache (and rows move into freed slots) without changing anyone's numbers."""
    long_prompt = [1] + [(5 * j) % 900 + 3 for j in range(80)]
    short = prompts(5)[:5]
    await engine.pause()
    tasks = [
        asyncio.create_task(engine.generate(long_prompt, SamplingParams(max_new_tokens=2), "L"))
    ]
    tasks += [
        asyncio.create_task(
            engine.generate(p, SamplingParams(max_new_tokens=25, stop_token_ids=()), f"s{i}")
        )
        for i, p in enumerate(short)
    ]
    await asyncio.sleep(0.05)
    await engine.resume()
    gens = await asyncio.gather(*tasks)
    for p, g in zip([long_prompt, *short], gens, strict=True):
        assert_matches_learner(reference, p, g, 1.0)
