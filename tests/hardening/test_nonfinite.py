"""F7.5: a NaN or inf loss or gradient skips the optimizer step; weights are not corrupted.

The non-finite values are produced for real inside a real Learner on a tiny Qwen3: a NaN
behaviour log-prob on a model token (as a broken engine would send), an inf model weight (NaN
logits, NaN loss), and an inf gradient with a finite loss (a gradient hook on one parameter).
Each skip is counted in the step's metrics (`skipped_steps`, which train.py writes to
metrics.jsonl) and logged as a warning; the weights and the optimizer state stay bit-identical,
and the next good batch trains normally.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.learner.batching import split_minibatches

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dist"))
from tiny import build_tiny_model, synthetic_batch, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(algorithm="gspo", lr=3e-3, num_minibatches=1, micro_batch_tokens=512)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def _on_policy(learner: Learner, seed: int):
    batch = synthetic_batch(seed)
    return with_old_logprobs(batch, learner.compute_logprobs(batch))


def _snapshot(learner: Learner) -> tuple[dict, dict]:
    weights = {k: v.detach().clone() for k, v in learner.model.state_dict().items()}
    optim = {
        (i, k): v.detach().clone()
        for i, state in enumerate(learner.optimizer.state.values())
        for k, v in state.items()
        if torch.is_tensor(v)
    }
    return weights, optim


def _assert_unchanged(before: tuple[dict, dict], learner: Learner) -> None:
    after = _snapshot(learner)
    for old, new in zip(before, after, strict=True):
        assert old.keys() == new.keys()
        for k in old:
            assert torch.equal(old[k], new[k]) or (
                torch.isnan(old[k]).any() and torch.equal(old[k].nan_to_num(), new[k].nan_to_num())
            ), k


def _all_finite(learner: Learner) -> bool:
    return all(torch.isfinite(p).all() for p in learner.model.parameters())


def _trained_once(model_dir: str) -> Learner:
    """A learner with one good step behind it, so the optimizer has state to protect."""
    learner = Learner(model_dir, replace(CFG))
    assert learner.update(_on_policy(learner, 1))["skipped_steps"] == 0
    return learner


def _check_skip(learner: Learner, batch, caplog) -> None:
    before, step, lr = _snapshot(learner), learner.step, learner.scheduler.get_last_lr()
    with caplog.at_level(logging.WARNING, logger="gspo_agents.learner.learner"):
        metrics = learner.update(batch)
    assert metrics["skipped_steps"] == 1.0
    assert learner.step == step and learner.scheduler.get_last_lr() == lr
    _assert_unchanged(before, learner)
    assert any("skipped optimizer step" in r.getMessage() for r in caplog.records)


def _check_recovers(learner: Learner) -> None:
    before = _snapshot(learner)[0]
    metrics = learner.update(_on_policy(learner, 9))
    assert metrics["skipped_steps"] == 0.0 and math.isfinite(metrics["loss"])
    assert _all_finite(learner)
    assert any(not torch.equal(before[k], v) for k, v in learner.model.state_dict().items())


def test_nan_behaviour_logprob_skips_the_step(model_dir, caplog):
    learner = _trained_once(model_dir)
    batch = _on_policy(learner, 2)
    old = batch.old_logprobs_BT.clone()
    row, col = batch.loss_mask_BT.nonzero()[3].tolist()  # a model-sampled token
    old[row, col] = float("nan")
    _check_skip(learner, with_old_logprobs(batch, old), caplog)
    _check_recovers(learner)
    learner.close()


def test_inf_model_weight_skips_the_step_and_spreads_nowhere(model_dir, caplog):
    learner = _trained_once(model_dir)
    batch = _on_policy(learner, 3)
    weight = learner.model.model.layers[0].mlp.down_proj.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight[0, 0] = float("inf")  # NaN activations -> NaN log-probs -> NaN loss
    _check_skip(learner, batch, caplog)
    with torch.no_grad():
        weight.copy_(saved)  # the operator's fix; nothing else was touched
    _check_recovers(learner)
    learner.close()


def test_inf_gradient_with_finite_loss_skips_the_step(model_dir, caplog):
    learner = _trained_once(model_dir)
    batch = _on_policy(learner, 4)
    param = learner.model.model.layers[1].self_attn.q_proj.weight
    handle = param.register_hook(lambda g: torch.full_like(g, float("inf")))
    try:
        before = _snapshot(learner)
        with caplog.at_level(logging.WARNING, logger="gspo_agents.learner.learner"):
            metrics = learner.update(batch)
        assert math.isfinite(metrics["loss"])  # the loss was fine; only the gradient was not
        assert metrics["skipped_steps"] == 1.0 and not math.isfinite(metrics["grad_norm"])
        _assert_unchanged(before, learner)
    finally:
        handle.remove()
    _check_recovers(learner)
    learner.close()


def test_one_bad_minibatch_skips_only_its_own_step(model_dir):
    learner = Learner(model_dir, replace(CFG, num_minibatches=2))
    batch = _on_policy(learner, 5)
    old = batch.old_logprobs_BT.clone()
    row = split_minibatches(batch.num_sequences, 2)[0][0]  # a row of the first minibatch
    col = int(batch.loss_mask_BT[row].nonzero()[0])
    old[row, col] = float("nan")
    metrics = learner.update(with_old_logprobs(batch, old))
    assert metrics["skipped_steps"] == 1.0 and learner.step == 1  # the other minibatch stepped
    assert _all_finite(learner)
    learner.close()
