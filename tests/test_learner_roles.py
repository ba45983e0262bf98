"""What each policy does inside one learner update, pinned against hand formulas on tiny models:
the clip anchor and the behaviour weight of decoupled mode, the routes that routing replay feeds
each row at each optimizer step, and the paper's expert volatility after ONE optimizer step.

Expected values are computed here from the model's own log-probs and router choices (single-row
forwards, Python sets), never by calling the learner's loss or volatility code.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gspo_agents.learner import Learner, LearnerConfig

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(algorithm="gspo", lr=3e-3, num_minibatches=1, micro_batch_tokens=256)


def _mismatched_batch(learner: Learner, noise: float = 0.05, seed: int = 3):
    batch = synthetic_batch(seed)
    return with_old_logprobs(batch, learner.compute_logprobs(batch), noise=noise, seed=seed)


@pytest.mark.parametrize("algorithm", ["gspo", "grpo"])
def test_decoupled_anchor_is_the_trainer_and_weight_is_trainer_over_engine(dense_dir, algorithm):
    learner = Learner(dense_dir, replace(CFG, algorithm=algorithm, old_logprobs="decoupled"))
    batch = _mismatched_batch(learner)
    trainer_lp = learner.compute_logprobs(batch)  # pi_prox: the weights before the update
    metrics = learner.update(batch)
    learner.close()
    mask = batch.loss_mask_BT.bool()
    engine_lp = batch.old_logprobs_BT
    N = batch.num_sequences
    # The anchor is pi_prox, so every ratio starts at exactly 1 (inside any clip band) and the
    # loss before the step is -(1/N) sum_i [behaviour weight x A_i], averaged per sequence.
    expected = 0.0
    for i in range(N):
        m = mask[i]
        a = float(batch.advantages_BT[i][m][0])
        d = (trainer_lp[i][m] - engine_lp[i][m]).double()
        if algorithm == "gspo":  # one weight per sequence: exp(mean log-ratio)
            w = math.exp(float(d.mean()))
        else:  # one weight per token, averaged over the sequence's tokens
            w = float(d.exp().mean())
        expected -= w * a / N
    assert metrics["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert metrics["clip_frac_seqs_first_mb"] == 0.0  # an engine anchor clips at this noise
    # the weight is really there: the plain mean advantage is a different number
    plain = -sum(float(batch.advantages_BT[i][mask[i]][0]) for i in range(N)) / N
    assert abs(expected - plain) > 1e-3


# --------------------------------------------------------------------------------------------
# routing replay and expert volatility (MoE)
# --------------------------------------------------------------------------------------------
def _natural_routes(learner: Learner, batch, rows) -> dict[int, torch.Tensor]:
    """Each row's own routing [layers, length, k] under the learner's current weights, from a
    forward of that row alone (no replay)."""
    out = {}
    lengths = batch.attention_mask_BT.sum(dim=1).tolist()
    with torch.no_grad():
        for r in rows:
            with learner.routers.recording() as rec:
                learner.policy_logprobs(batch.select([r]))
            out[r] = rec[0][:, : lengths[r]]
    return out


def _spy_replayed(learner: Learner, batch) -> list[tuple[int, int, torch.Tensor]]:
    """(call index, row, replayed routes of that row) for every forward run under replay."""
    seen: list[tuple[int, int, torch.Tensor]] = []
    rows_by_ids = {tuple(batch.input_ids_BT[r].tolist()): r for r in range(batch.num_sequences)}
    lengths = batch.attention_mask_BT.sum(dim=1).tolist()
    forward = learner._token_stats  # every forward of the learner's own model goes through it
    calls = [0]

    def spy(mb):
        replay = learner._routers._replay_LNK
        calls[0] += 1
        if replay is not None:
            T = mb.input_ids_BT.shape[1]
            for i in range(mb.num_sequences):
                ids = mb.input_ids_BT[i].tolist() + [0] * (batch.input_ids_BT.shape[1] - T)
                r = rows_by_ids[tuple(ids)]
                seen.append((calls[0], r, replay[:, i * T : i * T + lengths[r]].clone()))
        return forward(mb)

    learner._token_stats = spy  # type: ignore[method-assign]
    return seen


def test_routing_replay_feeds_each_row_its_own_old_routes_at_every_step(moe_dir):
    cfg = replace(CFG, lr=5e-2, num_minibatches=2, micro_batch_tokens=64, routing_replay=True)
    learner = Learner(moe_dir, cfg)
    batch = synthetic_batch(5)
    batch = with_old_logprobs(batch, learner.compute_logprobs(batch))
    rows = list(range(batch.num_sequences))
    old = _natural_routes(learner, batch, rows)
    assert any(not torch.equal(old[0], old[r]) for r in rows[1:])  # rows route differently
    seen = _spy_replayed(learner, batch)
    learner.update(batch)
    new = _natural_routes(learner, batch, rows)
    learner.close()
    assert {r for _, r, _ in seen} == set(rows)  # every row trained under replay
    for _, r, replayed in seen:
        torch.testing.assert_close(replayed, old[r], rtol=0, atol=0, msg=f"row {r}")
    # meaningful: the update moved some routes, so replaying anything recorded later would differ
    assert any(not torch.equal(old[r], new[r]) for r in rows)


def _changed_fraction(before: dict, after: dict, batch, rows, tokens="model", by="set") -> float:
    """The paper's volatility by hand (defaults): over model tokens and layers, the share of the
    activated experts (as a set) that are no longer activated. `tokens="all"` / `by="slot"` are
    the wrong definitions a test must tell apart."""
    changed = total = 0
    for r in rows:
        if tokens == "model":
            positions = batch.loss_mask_BT[r].bool().nonzero().flatten().tolist()
        else:
            positions = list(range(before[r].shape[1]))
        for layer in range(before[r].shape[0]):
            for t in positions:
                b, a = before[r][layer, t].tolist(), after[r][layer, t].tolist()
                if by == "set":
                    changed += len(set(b) - set(a))
                else:
                    changed += sum(x != y for x, y in zip(b, a, strict=True))
                total += len(b)
    return changed / total


def test_expert_volatility_is_the_model_token_set_change_after_one_optimizer_step(moe_dir):
    cfg = replace(CFG, lr=5e-2, num_minibatches=2, micro_batch_tokens=64)
    learner = Learner(moe_dir, cfg)
    batch = synthetic_batch(7)
    batch = with_old_logprobs(batch, learner.compute_logprobs(batch))
    first = list(range(batch.num_sequences // 2))  # split_minibatches: contiguous halves
    everyone = list(range(batch.num_sequences))
    before = _natural_routes(learner, batch, everyone)
    metrics = learner.update(batch)
    after_two = _natural_routes(learner, batch, everyone)
    learner.close()
    # the same first minibatch trained alone: its one optimizer step is the update's first
    one = Learner(moe_dir, replace(cfg, num_minibatches=1))
    sub = batch.select(first)
    one.update(sub)
    after_one = _natural_routes(one, sub, first)
    one.close()
    expected = _changed_fraction(before, after_one, batch, first)
    assert 0.0 < expected < 1.0
    assert metrics["expert_volatility"] == pytest.approx(expected, abs=1e-9)
    # the alternatives the definition rules out are different numbers on this batch
    assert _changed_fraction(before, after_two, batch, first) != pytest.approx(expected)
    for wrong in ({"tokens": "all"}, {"by": "slot"}):
        assert _changed_fraction(before, after_one, batch, first, **wrong) != pytest.approx(
            expected
        ), wrong
    assert metrics["expert_set_change_frac"] != pytest.approx(expected)


def test_routing_replay_with_the_engine_anchor_warns_that_routes_are_the_trainers(moe_dir, caplog):
    with caplog.at_level("WARNING", logger="gspo_agents.learner.learner"):
        Learner(moe_dir, replace(CFG, routing_replay=True)).close()
    assert "not the engine's routes" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="gspo_agents.learner.learner"):
        Learner(moe_dir, replace(CFG, routing_replay=True, old_logprobs="recompute")).close()
    assert "not the engine's routes" not in caplog.text
