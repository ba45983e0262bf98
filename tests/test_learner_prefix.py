"""Prompt-prefix sharing in the learner: same log-probs, same update, fewer tokens forwarded."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.learner.prefix import (
    PrefixGroup,
    plan_groups,
    plan_microbatches,
    shared_prefix_logprobs,
)
from gspo_agents.logprobs import token_logprobs
from gspo_agents.trajectory import FlatBatch

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import VOCAB, build_tiny_model, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(algorithm="gspo", eps_high=0.05, lr=3e-3, num_minibatches=2)


def grouped_batch(
    seed: int,
    groups: int = 2,
    rows_per_group: int = 4,
    prompt_len: int = 20,
    completion: tuple[int, int] = (3, 12),
) -> FlatBatch:
    """`groups` prompts, each followed by `rows_per_group` completions of varied length."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(groups):
        prompt = torch.randint(2, VOCAB, (prompt_len,), generator=g)
        for _ in range(rows_per_group):
            n = int(torch.randint(completion[0], completion[1] + 1, (1,), generator=g))
            rows.append((prompt, torch.randint(2, VOCAB, (n,), generator=g)))
    T = max(len(p) + len(c) for p, c in rows)
    B = len(rows)
    ids = torch.zeros(B, T, dtype=torch.long)
    attn = torch.zeros(B, T, dtype=torch.long)
    loss_mask = torch.zeros(B, T)
    for b, (p, c) in enumerate(rows):
        ids[b, : len(p) + len(c)] = torch.cat([p, c])
        attn[b, : len(p) + len(c)] = 1
        loss_mask[b, len(p) : len(p) + len(c)] = 1.0
    adv = torch.randn(B, generator=g)[:, None] * loss_mask
    versions = torch.where(loss_mask.bool(), 0, -1)
    return FlatBatch(ids, attn, loss_mask, torch.zeros(B, T), adv, versions)


def _reference_logprobs(model, batch: FlatBatch) -> torch.Tensor:
    logits = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
    return token_logprobs(logits, batch.input_ids_BT)


def _assert_close_on_tokens(a, b, batch: FlatBatch, atol=1e-5):
    mask = batch.attention_mask_BT.bool()
    assert (a[mask] - b[mask]).abs().max() < atol


# --------------------------------------------------------------------------------------------
# planning (pure)
# --------------------------------------------------------------------------------------------
def test_plan_groups_finds_each_prompt_group_and_its_longest_prefix():
    system = list(range(100, 110))  # shared by every row, too short to pay off alone
    a, b = system + list(range(20, 40)), system + list(range(50, 70))
    seqs = [a + [1, 2], a + [3], b + [4, 5, 6], a + [1, 7], b + [4, 8]]
    groups, singles = plan_groups(seqs, min_prefix=16)
    assert sorted(groups, key=lambda g: g.rows) == [
        PrefixGroup((0, 1, 3), 30),
        PrefixGroup((2, 4), 31),  # b + [4]: the prefix runs into the completion
    ]
    assert singles == []


def test_plan_groups_leaves_short_or_unshared_prefixes_to_the_plain_forward():
    seqs = [[5] * 10 + [1], [5] * 10 + [2], list(range(2, 40))]
    groups, singles = plan_groups(seqs, min_prefix=16)
    assert groups == [] and singles == [0, 1, 2]


def test_identical_rows_keep_one_token_each_after_the_prefix():
    seqs = [list(range(2, 30))] * 3
    groups, _ = plan_groups(seqs, min_prefix=16)
    assert groups == [PrefixGroup((0, 1, 2), 27)]


def test_micro_batches_keep_groups_together_within_the_budget():
    prompt = list(range(2, 202))
    seqs = [prompt + [i] * 30 for i in range(8)] + [list(range(300, 340))]
    rows = [10 + i for i in range(9)]
    micro = plan_microbatches(rows, seqs, micro_batch_tokens=200 + 8 * 30)
    assert sorted(r for m in micro for r in m) == rows
    assert [10 + i for i in range(8)] in micro  # the whole group: prefix counted once
    small = plan_microbatches(rows, seqs, micro_batch_tokens=200 + 3 * 30)
    assert sorted(r for m in small for r in m) == rows
    assert max(len(m) for m in small) == 3  # the group cut into chunks that fit


# --------------------------------------------------------------------------------------------
# numerics against the plain forward
# --------------------------------------------------------------------------------------------
def test_shared_logprobs_equal_the_plain_forward(dense_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32)
    batch = grouped_batch(0)
    # a fifth row with its own prompt, shuffled in: it takes the plain path
    lone = grouped_batch(1, groups=1, rows_per_group=1)
    rows = [0, 1, 2, 3, 8, 4, 5, 6, 7]
    width = max(batch.input_ids_BT.shape[1], lone.input_ids_BT.shape[1])
    padded = FlatBatch(
        *[torch.cat([_pad_to(t, width), _pad_to(u, width)]) for t, u in _pairs(batch, lone)]
    )
    batch = padded.select(rows)
    with torch.no_grad():
        shared = shared_prefix_logprobs(model, batch.input_ids_BT, batch.attention_mask_BT, 1.0)
        _assert_close_on_tokens(shared, _reference_logprobs(model, batch), batch)
    assert len(plan_groups(_seqs(batch))[0]) == 2


def test_shared_logprob_gradients_equal_the_plain_forward(dense_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32)
    batch = grouped_batch(2)
    weights_BT = torch.randn(batch.input_ids_BT.shape) * batch.attention_mask_BT
    grads = []
    for share in (False, True):
        model.zero_grad()
        if share:
            lp = shared_prefix_logprobs(model, batch.input_ids_BT, batch.attention_mask_BT, 0.7)
        else:
            logits = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT)
            lp = token_logprobs(logits.logits, batch.input_ids_BT, 0.7)
        (lp * weights_BT).sum().backward()  # prompt positions too: their gradient is summed
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, ref in grads[0].items():  # float rounding, relative to the gradient's scale
        assert (grads[1][name] - ref).abs().max() <= 1e-5 * ref.abs().max(), name


# --------------------------------------------------------------------------------------------
# the learner
# --------------------------------------------------------------------------------------------
def _update(path: str, batch: FlatBatch, share: bool, **overrides):
    # the plain side keeps padded rows: the micro-batches are cut the same way on both sides
    cfg = replace(CFG, share_prompt_prefix=share, packing="off", **overrides)
    learner = Learner(path, cfg)
    before = {k: v.detach().clone() for k, v in learner.model.state_dict().items()}
    on_policy = with_old_logprobs(batch, learner.compute_logprobs(batch), noise=0.02, seed=1)
    metrics = learner.update(on_policy)
    step = {k: v.detach() - before[k] for k, v in learner.model.state_dict().items()}
    learner.close()
    return metrics, step


def _assert_same_step(step0: dict, step1: dict) -> None:
    """The two parameter updates agree up to float rounding.

    Adam divides each gradient element by its own magnitude, so an element whose gradient is
    rounding noise near 0 can move by up to lr either way: compare the steps as vectors (relative
    norm, plus room for one such element: in a 64-element norm weight one element's step of
    -7.3e-4 against -6.9e-4 alone was 1.2e-3 of the vector's norm, on 2026-12-07's CPU and
    transformers 5.25) and bound any single element by a tenth of one step.
    """
    for name, ref in step0.items():
        diff = step1[name] - ref
        assert diff.norm() <= 1e-3 * ref.norm() + 0.1 * CFG.lr, name
        assert diff.abs().max() <= 0.1 * CFG.lr, name


@pytest.mark.parametrize("budget", [4096, 60])  # all rows at once; groups cut into chunks
def test_update_with_sharing_equals_the_plain_update(dense_dir, budget):
    batch = grouped_batch(3, groups=2, rows_per_group=4)
    m0, w0 = _update(dense_dir, batch, share=False, micro_batch_tokens=budget)
    m1, w1 = _update(dense_dir, batch, share=True, micro_batch_tokens=budget)
    for key in ("loss", "clip_frac_tokens", "clip_frac_seqs", "ratio_mean", "grad_norm"):
        assert m1[key] == pytest.approx(m0[key], rel=1e-5, abs=1e-6), key
    _assert_same_step(w0, w1)
    assert 0 < m0["clip_frac_tokens"] < 1  # the comparison covers clipped and unclipped rows


def test_batch_without_a_shared_prefix_falls_back_and_stays_correct(dense_dir):
    batch = grouped_batch(4, groups=8, rows_per_group=1)  # every prompt different
    assert plan_groups(_seqs(batch))[0] == []
    m0, w0 = _update(dense_dir, batch, share=False)
    m1, w1 = _update(dense_dir, batch, share=True)
    assert m1["loss"] == pytest.approx(m0["loss"], rel=1e-5, abs=1e-6)
    _assert_same_step(w0, w1)


def test_loss_mask_inside_the_shared_prefix_stays_correct(dense_dir):
    # completions that open the same way: the shared prefix covers model tokens
    batch = grouped_batch(5, prompt_len=12, completion=(14, 20))
    ids = batch.input_ids_BT.clone()
    ids[:4, 12:24] = ids[0, 12:24]
    ids[4:, 12:24] = ids[4, 12:24]
    batch = FlatBatch(ids, *batch._tensors()[1:])
    groups, _ = plan_groups(_seqs(batch))
    assert all(g.prefix_len >= 24 for g in groups) and len(groups) == 2
    assert batch.loss_mask_BT[:, 12:24].sum() > 0
    m0, w0 = _update(dense_dir, batch, share=False)
    m1, w1 = _update(dense_dir, batch, share=True)
    assert m1["loss"] == pytest.approx(m0["loss"], rel=1e-5, abs=1e-6)
    _assert_same_step(w0, w1)


def test_sharing_is_off_for_moe_models(tmp_path, caplog):
    moe_dir = build_tiny_model(tmp_path / "moe", moe=True)
    learner = Learner(moe_dir, replace(CFG, share_prompt_prefix=True))
    assert not learner._share_prefix
    assert "mixture-of-experts" in caplog.text
    learner.close()


# --------------------------------------------------------------------------------------------
def _seqs(batch: FlatBatch) -> list[list[int]]:
    lengths = batch.attention_mask_BT.sum(1).tolist()
    return [batch.input_ids_BT[b, : lengths[b]].tolist() for b in range(batch.num_sequences)]


def _pairs(a: FlatBatch, b: FlatBatch):
    return zip(a._tensors(), b._tensors(), strict=True)


def _pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.shape[1]))
