"""Padding-free micro-batches and the chunked output layer in the learner: a packed row with
per-document attention gives the padded rows' log-probs, gradients and update."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.learner.batching import packed_microbatches
from gspo_agents.learner.head import TokenHead
from gspo_agents.learner.packing import pack, packing_unsupported

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import VOCAB, synthetic_batch, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(algorithm="gspo", eps_high=0.05, lr=3e-3, num_minibatches=2)


def test_packed_microbatches_fill_the_budget_with_real_tokens():
    rows, lengths = [10, 11, 12, 13, 14], [30, 5, 20, 12, 50]
    micro = packed_microbatches(rows, lengths, micro_batch_tokens=40)
    assert sorted(r for m in micro for r in m) == rows
    by_row = dict(zip(rows, lengths, strict=True))
    sums = [sum(by_row[r] for r in m) for m in micro]
    assert [14] in micro  # longer than the budget: alone
    assert all(s <= 40 for m, s in zip(micro, sums, strict=True) if m != [14])
    assert len(micro) == 3  # 50 | 30 + 5 | 20 + 12: padded rows would need 4 (30 x 2 > 40)


def test_pack_then_unpack_restores_the_padded_layout():
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0], [1, 2, 3, 4]])
    packed = pack(ids, [3, 2, 4])
    assert packed.input_ids_1N.tolist() == [[5, 6, 7, 8, 9, 1, 2, 3, 4]]
    assert packed.position_ids_1N.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    x = packed.unpack(packed.input_ids_1N.float())
    assert x.tolist() == [[0, 6, 7, 0], [0, 9, 0, 0], [0, 2, 3, 4]]  # first tokens and padding: 0


@pytest.mark.parametrize("chunk", [0, 11])
def test_packed_row_equals_padded_rows_values_and_gradients(dense_dir, chunk):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32)
    assert packing_unsupported(model, "on") is None
    assert "cross-document" in packing_unsupported(model, "auto")  # sdpa: only when asked
    head = TokenHead(model, 0.8, chunk)
    batch = synthetic_batch(3)
    lengths = batch.attention_mask_BT.sum(1).tolist()
    assert len(set(lengths)) > 1  # padding to remove
    results = []
    for packed in (False, True):
        model.zero_grad()
        if packed:
            p = pack(batch.input_ids_BT, lengths)
            stats = [p.unpack(x) for x in head(p.input_ids_1N, position_ids=p.position_ids_1N)]
        else:
            stats = list(head(batch.input_ids_BT, attention_mask=batch.attention_mask_BT))
        mask = batch.loss_mask_BT
        ((stats[0] * batch.advantages_BT).sum() + (stats[1] * mask).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((stats[0].detach() * mask, stats[1].detach() * mask, grads))
    (lp0, ent0, g0), (lp1, ent1, g1) = results
    assert (lp1 - lp0).abs().max() < 1e-5 and (ent1 - ent0).abs().max() < 1e-5
    for name in g0:
        assert (g1[name] - g0[name]).abs().max() <= 1e-5 * g0[name].abs().max(), name


def _update(path: str, batch, **overrides):
    learner = Learner(path, replace(CFG, **overrides))
    before = {k: v.detach().clone() for k, v in learner.model.state_dict().items()}
    on_policy = with_old_logprobs(batch, learner.compute_logprobs(batch), noise=0.02, seed=1)
    metrics = learner.update(on_policy)
    step = {k: v.detach() - before[k] for k, v in learner.model.state_dict().items()}
    used = (learner._pack, learner._head.chunked)
    learner.close()
    return metrics, step, used


def test_packing_auto_keeps_padded_rows_with_a_dense_mask_kernel(dense_dir):
    learner = Learner(dense_dir, CFG)  # packing=auto, sdpa on CPU
    assert not learner._pack and learner._head.chunked
    learner.close()


def test_update_on_the_new_paths_equals_todays_update(dense_dir):
    """Chunked output layer + packed rows against full logits + padded rows, same micro-batches
    (a budget that holds each minibatch whole on both paths)."""
    batch = synthetic_batch(5, batch_size=8)
    m0, w0, used0 = _update(dense_dir, batch, logprob_chunk_tokens=0, packing="off")
    m1, w1, used1 = _update(dense_dir, batch, logprob_chunk_tokens=9, packing="on")
    assert used0 == (False, False) and used1 == (True, True)
    for key in ("loss", "clip_frac_tokens", "ratio_mean", "grad_norm", "entropy"):
        assert m1[key] == pytest.approx(m0[key], rel=1e-5, abs=1e-6), key
    assert 0 < m1["entropy"] < math.log(VOCAB)  # nats, over model tokens
    for name, ref in w0.items():  # Adam: compare steps as vectors, bound any element by lr/10
        diff = w1[name] - ref
        assert diff.norm() <= 1e-3 * ref.norm() + 1e-9, name
        assert diff.abs().max() <= 0.1 * CFG.lr, name
