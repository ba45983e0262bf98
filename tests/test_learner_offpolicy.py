"""Learner options: the clip anchor (engine / recompute / decoupled), truncated and masked IS,
loss aggregation, routing replay and the paper's expert volatility, on tiny random checkpoints."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.learner.moe import changed_experts, differing_expert_sets
from gspo_agents.offpolicy import sequence_log_ratio

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(algorithm="gspo", lr=3e-3, num_minibatches=2, micro_batch_tokens=256)


def _run(path: str, batch_fn, **overrides):
    """One update from the checkpoint; returns (metrics, weights after, the batch used)."""
    learner = Learner(path, replace(CFG, **overrides))
    batch = batch_fn(learner)
    metrics = learner.update(batch)
    weights = {k: v.detach().clone() for k, v in learner.model.state_dict().items()}
    learner.close()
    return metrics, weights, batch


def _engine(noise: float, seed: int = 3):
    """A batch whose 'engine' log-probs are the policy's own plus seeded noise (mismatch)."""

    def make(learner: Learner):
        batch = synthetic_batch(seed)
        return with_old_logprobs(batch, learner.compute_logprobs(batch), noise=noise, seed=seed)

    return make


def _max_diff(a, b) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_recompute_anchors_on_the_trainer_and_removes_first_minibatch_clipping(dense_dir):
    engine, w_engine, batch = _run(dense_dir, _engine(0.05))
    recompute, w_recompute, _ = _run(dense_dir, _engine(0.05), old_logprobs="recompute")
    # noise of 0.05 per token is far outside GSPO's 3e-4 band: the engine anchor clips at once
    assert engine["clip_frac_seqs_first_mb"] > 0.5
    assert recompute["clip_frac_seqs_first_mb"] == 0.0
    assert _max_diff(w_engine, w_recompute) > 1e-4
    # the signed mismatch is reported either way; here over the whole batch, checked by hand
    learner = Learner(dense_dir, CFG)
    trainer_lp = learner.compute_logprobs(batch)
    learner.close()
    log_w = sequence_log_ratio(trainer_lp, batch.old_logprobs_BT, batch.loss_mask_BT)
    assert recompute["engine_logratio_seq_mean"] == pytest.approx(float(log_w.mean()), abs=1e-5)
    assert recompute["engine_logratio_seq_std"] == pytest.approx(
        float(log_w.std(unbiased=False)), rel=1e-3
    )
    assert 0.0 < recompute["is_ess"] <= 1.0
    assert engine["engine_logratio_seq_std"] > 0.0


def test_without_mismatch_every_anchor_gives_the_same_update(dense_dir):
    _, w_engine, _ = _run(dense_dir, _engine(0.0))
    for mode in ("recompute", "decoupled"):
        m, w, _ = _run(dense_dir, _engine(0.0), old_logprobs=mode)
        assert _max_diff(w_engine, w) < 1e-5, mode
        assert m["is_ess"] == pytest.approx(1.0, abs=1e-6)


def test_decoupled_weights_change_the_update_and_tis_bounds_them(dense_dir):
    _, w_recompute, _ = _run(dense_dir, _engine(0.1), old_logprobs="recompute")
    _, w_decoupled, _ = _run(dense_dir, _engine(0.1), old_logprobs="decoupled")
    m_tis, w_tis, _ = _run(dense_dir, _engine(0.1), old_logprobs="recompute", seq_is_cap=1.0)
    assert _max_diff(w_recompute, w_decoupled) > 1e-5
    assert _max_diff(w_tis, w_decoupled) > 1e-5
    assert 0.0 < m_tis["is_truncated_frac"] < 1.0


def test_masking_every_sequence_leaves_the_weights_untouched(dense_dir):
    learner = Learner(dense_dir, CFG)
    before = {k: v.detach().clone() for k, v in learner.model.state_dict().items()}
    learner.close()
    m, after, _ = _run(dense_dir, _engine(0.05), old_logprobs="recompute", seq_mask_bound=1e-9)
    assert m["is_masked_seq_frac"] == 1.0
    assert _max_diff(before, after) == 0.0


def test_token_mean_aggregation_does_not_depend_on_the_micro_batch_cut(dense_dir):
    _, big, _ = _run(dense_dir, _engine(0.0), algorithm="grpo", loss_agg="token-mean")
    _, small, _ = _run(
        dense_dir, _engine(0.0), algorithm="grpo", loss_agg="token-mean", micro_batch_tokens=24
    )
    # Adam divides each gradient element by its own magnitude: rounding noise in a near-zero
    # element (packed micro-batches sum in another order) moves it by a small fraction of lr
    same = 1e-2 * CFG.lr
    assert _max_diff(big, small) < same
    _, mean_mean, _ = _run(dense_dir, _engine(0.0), algorithm="grpo")
    assert _max_diff(big, mean_mean) > 10 * same


# --------------------------------------------------------------------------------------------
# MoE: routing replay and expert volatility
# --------------------------------------------------------------------------------------------
def test_changed_experts_counts_the_papers_fraction():
    before = torch.tensor([[[0, 1], [2, 3], [4, 5]]])  # 1 layer, 3 tokens, top-2
    after = torch.tensor([[[0, 1], [2, 7], [6, 7]]])
    mask = torch.tensor([1, 1, 0])  # the third token is a prompt token
    assert changed_experts(before, after, mask) == (1, 4)  # 1 of the 4 activated experts
    assert differing_expert_sets(before, after, torch.ones(3)) == (2, 3)


def test_replaying_the_own_routing_changes_nothing_and_other_routing_changes_the_output(moe_dir):
    learner = Learner(moe_dir, CFG)
    batch = synthetic_batch(5)
    mb = batch.select(list(range(batch.num_sequences)))
    with learner.routers.recording() as rec:
        natural = learner.policy_logprobs(mb)
    routes = rec[0]
    learner._routers.replay(routes)
    replayed = learner.policy_logprobs(mb)
    shifted = (routes + 1) % learner.model.config.num_experts
    learner._routers.replay(shifted)
    other = learner.policy_logprobs(mb)
    mask = mb.attention_mask_BT.bool()
    torch.testing.assert_close(replayed[mask], natural[mask], rtol=1e-5, atol=1e-5)
    assert (other - natural)[mask].abs().max() > 1e-3
    # the router still learns: its gradient flows through the replayed experts' gate weights
    learner.model.train()
    learner._routers.replay(routes)
    lp = learner.policy_logprobs(mb)
    lp[mask].sum().backward()
    learner._routers.replay(None)
    assert learner._routers.routers[0].weight.grad.abs().sum() > 0
    learner.close()


def test_routing_replay_update_trains_and_reports_both_volatility_measures(moe_dir):
    m, w, _ = _run(moe_dir, _engine(0.0), lr=1e-2, routing_replay=True)
    m0, w0, _ = _run(moe_dir, _engine(0.0), lr=1e-2)
    for metrics in (m, m0):
        assert 0.0 < metrics["expert_volatility"] <= 1.0
        assert 0.0 < metrics["expert_set_change_frac"] <= 1.0
    assert _max_diff(w, w0) > 1e-6  # the second minibatch saw the old routing, not the new
    still, _, _ = _run(moe_dir, _engine(0.0), lr=1e-30, routing_replay=True)
    assert still["expert_volatility"] == 0.0 and still["expert_set_change_frac"] == 0.0


def test_routing_replay_on_a_dense_model_is_a_clear_error(dense_dir):
    with pytest.raises(ValueError, match="routing_replay needs a mixture-of-experts"):
        Learner(dense_dir, replace(CFG, routing_replay=True))


def test_config_rejects_bad_options():
    with pytest.raises(ValueError, match="loss_agg"):
        LearnerConfig(loss_agg="sum")
    with pytest.raises(ValueError, match="old_logprobs"):
        LearnerConfig(old_logprobs="trainer")
