"""Single-process learner on tiny random Qwen3 / Qwen3-MoE checkpoints."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gspo_agents.learner import BatchError, CheckpointError, Learner, LearnerConfig
from gspo_agents.learner.batching import split_minibatches, token_budget_microbatches
from gspo_agents.logprobs import token_logprobs
from gspo_agents.trajectory import FlatBatch

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(algorithm="grpo", lr=3e-3, num_minibatches=2, micro_batch_tokens=256)


def _learner(path: str, **overrides) -> Learner:
    return Learner(path, replace(CFG, **overrides))


def _on_policy(learner: Learner, seed: int, **kw) -> FlatBatch:
    batch = synthetic_batch(seed, **kw)
    return with_old_logprobs(batch, learner.compute_logprobs(batch))


def _weights(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in learner.model.state_dict().items()}


def _assert_same_weights(a, b, atol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0.0 if atol == 0 else 1e-5, atol=atol, msg=k)


# --------------------------------------------------------------------------------------------
# batching (pure)
# --------------------------------------------------------------------------------------------
def test_minibatches_cover_every_row_once():
    mbs = split_minibatches(10, 4)
    assert [len(m) for m in mbs] == [3, 3, 2, 2]
    assert sorted(r for m in mbs for r in m) == list(range(10))
    assert split_minibatches(2, 4) == [[0], [1]]


def test_micro_batches_respect_the_padded_token_budget():
    rows = list(range(6))
    lengths = [10, 3, 7, 20, 4, 9]
    micro = token_budget_microbatches(rows, lengths, micro_batch_tokens=20)
    assert sorted(r for m in micro for r in m) == rows
    for m in micro:
        assert len(m) == 1 or max(lengths[r] for r in m) * len(m) <= 20


# --------------------------------------------------------------------------------------------
# learning
# --------------------------------------------------------------------------------------------
def test_update_raises_the_logprob_of_positive_advantage_sequences(dense_dir):
    learner = _learner(dense_dir)
    batch = _on_policy(learner, seed=1)
    mask = batch.loss_mask_BT
    before = (learner.compute_logprobs(batch) * mask).sum(1)
    metrics = learner.update(batch)
    after = (learner.compute_logprobs(batch) * mask).sum(1)
    adv = batch.advantages_BT.sum(1) / mask.sum(1)
    # the update follows the advantage: the log-likelihood change correlates with it
    change = after - before
    assert torch.corrcoef(torch.stack([change, adv]))[0, 1] > 0.5
    assert metrics["optimizer_steps"] == 2 and metrics["skipped_steps"] == 0
    assert metrics["logprob_gap_abs_mean"] < 1e-5  # on-policy: engine == learner log-probs
    assert metrics["ratio_min"] <= metrics["ratio_mean"] <= metrics["ratio_max"]
    for key in ("loss", "grad_norm", "lr", "update_tokens_per_s", "clip_frac_tokens", "approx_kl"):
        assert key in metrics
    learner.close()


def test_learner_logprobs_use_the_rollout_temperature(dense_dir):
    learner = _learner(dense_dir, temperature=0.7)
    batch = synthetic_batch(2)
    with torch.no_grad():
        logits = learner.model(input_ids=batch.input_ids_BT).logits
    expected = token_logprobs(logits, batch.input_ids_BT, temperature=0.7)
    mask = batch.attention_mask_BT.bool()
    torch.testing.assert_close(
        learner.compute_logprobs(batch)[mask], expected[mask], atol=1e-5, rtol=0
    )
    learner.close()


def test_micro_batch_size_does_not_change_the_update(dense_dir):
    batch = None
    results = []
    for budget in (24, 4096):  # one row per micro-batch vs the whole minibatch at once
        learner = _learner(dense_dir, micro_batch_tokens=budget, algorithm="gspo", eps_high=0.05)
        batch = batch or _on_policy(learner, seed=3)
        metrics = learner.update(batch)
        results.append((metrics, _weights(learner)))
        learner.close()
    (m1, w1), (m2, w2) = results
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-4, abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(m2["grad_norm"], rel=1e-4)
    _assert_same_weights(w1, w2, atol=1e-5)


def test_activation_checkpointing_does_not_change_the_update(dense_dir):
    results = []
    for ac in (False, True):
        learner = _learner(dense_dir, activation_checkpointing=ac)
        assert learner.model.is_gradient_checkpointing == ac
        batch = _on_policy(learner, seed=13)
        results.append((learner.update(batch)["loss"], _weights(learner)))
        learner.close()
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    _assert_same_weights(results[0][1], results[1][1], atol=1e-6)


def test_non_finite_loss_skips_the_step_and_leaves_weights_untouched(dense_dir):
    learner = _learner(dense_dir, num_minibatches=1)
    batch = _on_policy(learner, seed=4)
    old = batch.old_logprobs_BT.clone()
    old[0, batch.loss_mask_BT[0].bool().nonzero()[0, 0]] = float("nan")
    bad = with_old_logprobs(batch, old)
    before = _weights(learner)
    metrics = learner.update(bad)
    assert metrics["skipped_steps"] == 1 and learner.skipped_steps == 1 and learner.step == 0
    _assert_same_weights(before, _weights(learner))
    metrics = learner.update(batch)  # and the learner is still usable
    assert metrics["skipped_steps"] == 0 and learner.step == 1
    learner.close()


def test_batch_from_another_tokenizer_is_rejected(dense_dir):
    learner = _learner(dense_dir)
    batch = synthetic_batch(5)
    ids = batch.input_ids_BT.clone()
    ids[0, 1] = 10_000
    with pytest.raises(BatchError, match="vocab size 300"):
        learner.update(FlatBatch(ids, *batch._tensors()[1:]))
    learner.close()


def test_warmup_ramps_the_learning_rate(dense_dir):
    learner = _learner(dense_dir, warmup_steps=4, num_minibatches=2)
    metrics = learner.update(_on_policy(learner, seed=6))
    assert metrics["lr"] == pytest.approx(CFG.lr * 3 / 4)  # after 2 of 4 warm-up steps
    learner.close()


# --------------------------------------------------------------------------------------------
# export and checkpoints
# --------------------------------------------------------------------------------------------
def test_export_hf_reloads_with_identical_logits(dense_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    learner = _learner(dense_dir)
    learner.update(_on_policy(learner, seed=7))
    out = learner.export_hf(str(tmp_path / "export"))
    assert json.loads((Path(out) / "tokenizer_config.json").read_text())["marker"]
    assert not Path(out + ".tmp").exists()
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = synthetic_batch(8).input_ids_BT
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids).logits, learner.model(input_ids=ids).logits, atol=1e-5, rtol=0
        )
    learner.close()


def test_checkpoint_round_trip_restores_weights_optimizer_and_extra_state(dense_dir, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    learner = _learner(dense_dir, warmup_steps=3)
    learner.update(_on_policy(learner, seed=9))
    learner.save_checkpoint(ckpt, {"data_position": 17, "partial": [[1, 2, 3]]})
    learner.save_checkpoint(ckpt, {"data_position": 18, "partial": [[1, 2, 3]]})  # replaces
    saved = _weights(learner)
    nxt = _on_policy(learner, seed=10)
    expected = learner.update(nxt)
    learner.close()

    fresh = _learner(dense_dir, warmup_steps=3)
    extra = fresh.load_checkpoint(ckpt)
    assert extra == {"data_position": 18, "partial": [[1, 2, 3]]}
    assert fresh.step == 2
    _assert_same_weights(saved, _weights(fresh))
    got = fresh.update(nxt)  # same Adam moments and lr schedule -> the same step
    for key in ("loss", "grad_norm", "lr", "clip_frac_tokens"):
        assert got[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9), key
    fresh.close()


def test_missing_checkpoint_is_a_clear_error(dense_dir, tmp_path):
    learner = _learner(dense_dir)
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        learner.load_checkpoint(str(tmp_path / "nothing-here"))
    learner.close()


# --------------------------------------------------------------------------------------------
# MoE
# --------------------------------------------------------------------------------------------
def test_moe_update_reports_expert_volatility(moe_dir):
    learner = _learner(moe_dir, algorithm="gspo", lr=1e-2)
    batch = _on_policy(learner, seed=11)
    metrics = learner.update(batch)
    assert 0.0 < metrics["expert_volatility"] <= 1.0
    learner.close()
    # no update at all (lr 0 → weights unchanged) → no expert set can change
    still = _learner(moe_dir, algorithm="gspo", lr=1e-30)
    assert still.update(batch)["expert_volatility"] == 0.0
    still.close()


def test_dense_model_reports_no_volatility(dense_dir):
    learner = _learner(dense_dir)
    assert "expert_volatility" not in learner.update(_on_policy(learner, seed=12))
    learner.close()


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="did you mean 'gspo'"):
        LearnerConfig(algorithm="gpso")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        LearnerConfig(micro_batch_tokens=0)
