"""Loss aggregation modes and importance weights in `policy_loss` (value and gradient), and the
off-policy weights of `gspo_agents.offpolicy` against hand computation."""

from __future__ import annotations

import math

import pytest
import torch

from gspo_agents.objectives import LOSS_AGGS, policy_loss
from gspo_agents.offpolicy import OffPolicyConfig, behaviour_weights, sequence_log_ratio

MASK = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
OLD = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -0.5, -1.5, -1.0]])


def _loss_grad(algorithm, adv, **kw):
    lp = OLD.clone().requires_grad_(True)  # on-policy: every ratio is 1, nothing clips
    loss, m = policy_loss(lp, OLD, adv, MASK, algorithm=algorithm, **kw)
    (grad,) = torch.autograd.grad(loss, lp)
    return loss, grad, m


@pytest.mark.parametrize("algorithm", ["gspo", "gspo_token", "grpo"])
def test_loss_aggregation_modes_by_hand(algorithm):
    adv = torch.tensor([1.0, -2.0])
    n = torch.tensor([2.0, 3.0])  # model tokens per row
    expected = {  # at s = 1 every term is A_i
        "seq-mean-token-mean": -(1.0 - 2.0) / 2,
        "token-mean": -(2 * 1.0 + 3 * -2.0) / 5,
        "seq-mean-token-sum": -(2 * 1.0 + 3 * -2.0) / 2,
        "seq-mean-token-sum-norm": -(2 * 1.0 + 3 * -2.0) / (2 * 10),  # norm_tokens 10
    }
    token_weight = {  # d loss / d lp_t = -A_i * (weight of a token of row i)
        "seq-mean-token-mean": 1 / (n * 2),
        "token-mean": torch.full((2,), 1 / 5),
        "seq-mean-token-sum": torch.full((2,), 1 / 2),
        "seq-mean-token-sum-norm": torch.full((2,), 1 / 20),
    }
    for agg in LOSS_AGGS:
        loss, grad, _ = _loss_grad(algorithm, adv, loss_agg=agg, norm_tokens=10)
        assert loss.item() == pytest.approx(expected[agg], rel=1e-6), agg
        if algorithm == "gspo":  # d s_i / d lp_t = s_i / n_i: the sequence term spreads evenly
            want = -(adv * token_weight[agg] * n / n)[:, None] * MASK
        else:
            want = -(adv * token_weight[agg])[:, None] * MASK
        torch.testing.assert_close(grad, want, rtol=1e-6, atol=1e-8, msg=agg)
    with pytest.raises(ValueError, match="token-mean"):
        policy_loss(OLD.clone(), OLD, adv, MASK, loss_agg="mean")


def test_token_mean_uses_the_global_token_count():
    adv = torch.tensor([1.0, -2.0])
    full, _, _ = _loss_grad("grpo", adv, loss_agg="token-mean")
    parts = [
        policy_loss(
            OLD[r],
            OLD[r],
            adv[r],
            MASK[r],
            algorithm="grpo",
            loss_agg="token-mean",
            num_sequences=2,
            num_tokens=5,
        )[0]
        for r in ([0], [1])
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), rel=1e-6)


@pytest.mark.parametrize("algorithm", ["gspo", "gspo_token", "grpo"])
def test_weights_scale_each_sequence_and_zero_drops_it(algorithm):
    adv = torch.tensor([1.0, -2.0])
    base, grad, _ = _loss_grad(algorithm, adv)
    w, wgrad, _ = _loss_grad(algorithm, adv, weights=torch.tensor([0.5, 0.0]))
    assert w.item() == pytest.approx(-(0.5 * 1.0) / 2, rel=1e-6)
    torch.testing.assert_close(wgrad[0], 0.5 * grad[0])
    assert torch.all(wgrad[1] == 0)
    # [B, T] weights constant within a row are the same as [B]
    w_BT, _, _ = _loss_grad(
        algorithm,
        adv,
        weights=torch.tensor([[9.0, 0.5, 0.5, 9.0]] * 2) * torch.tensor([[1.0], [0.0]]),
    )
    assert w_BT.item() == pytest.approx(w.item(), rel=1e-6)
    assert base.item() != w.item()


def test_sequence_log_ratio_is_signed_and_length_normalised():
    trainer = OLD + torch.tensor([[0.0, 0.2, 0.4, 9.0], [0.0, -0.3, -0.3, -0.3]])
    torch.testing.assert_close(sequence_log_ratio(trainer, OLD, MASK), torch.tensor([0.3, -0.3]))


def test_decoupled_weights_sequence_and_token_level_with_cap_and_mask():
    trainer = OLD + torch.tensor([[0.0, 0.2, 0.4, 0.0], [0.0, -1.0, -1.0, -1.0]])
    cfg = OffPolicyConfig("decoupled")
    w, m = behaviour_weights(trainer, OLD, MASK, cfg, "sequence")
    torch.testing.assert_close(w[0], torch.tensor([0.0, math.exp(0.3), math.exp(0.3), 0.0]))
    torch.testing.assert_close(w[1, 1:], torch.full((3,), math.exp(-1.0)))
    assert m["engine_logratio_seq_mean"] == pytest.approx(-0.35)
    assert m["engine_logratio_seq_std"] == pytest.approx(0.65)
    w1, w2 = math.exp(0.3), math.exp(-1.0)
    assert m["is_ess"] == pytest.approx((w1 + w2) ** 2 / (2 * (w1**2 + w2**2)))
    tok, _ = behaviour_weights(trainer, OLD, MASK, cfg, "token")
    torch.testing.assert_close(tok[0, 1:3], torch.tensor([math.exp(0.2), math.exp(0.4)]))
    capped, mc = behaviour_weights(
        trainer, OLD, MASK, OffPolicyConfig("decoupled", 1.2), "sequence"
    )
    torch.testing.assert_close(capped[0, 1:3], torch.full((2,), 1.2))
    assert mc["is_truncated_frac"] == pytest.approx(2 / 5)
    masked, mm = behaviour_weights(trainer, OLD, MASK, OffPolicyConfig("recompute", None, 0.5))
    assert torch.all(masked[1] == 0) and torch.all(masked[0, 1:3] == 1)
    assert mm["is_masked_seq_frac"] == 0.5
    none, mn = behaviour_weights(trainer, OLD, MASK, OffPolicyConfig("recompute"))
    assert none is None and "engine_logratio_seq_mean" in mn


def test_truncated_is_gradient_is_the_capped_weight_times_the_plain_one():
    trainer = OLD + torch.tensor([[0.0, 0.2, 0.4, 0.0], [0.0, -1.0, -1.0, -1.0]])
    w, _ = behaviour_weights(trainer, OLD, MASK, OffPolicyConfig("recompute", 1.1), "sequence")
    adv = torch.tensor([1.0, 1.0])
    _, grad, _ = _loss_grad("gspo", adv)
    _, wgrad, _ = _loss_grad("gspo", adv, weights=w)
    torch.testing.assert_close(wgrad[0], 1.1 * grad[0])  # e^0.3 = 1.35, truncated at 1.1
    torch.testing.assert_close(wgrad[1], math.exp(-1.0) * grad[1])  # under the cap: e^-1


def test_off_policy_config_rejects_bad_combinations():
    with pytest.raises(ValueError, match="old_logprobs=recompute or decoupled"):
        OffPolicyConfig("engine", seq_is_cap=2.0)
    with pytest.raises(ValueError, match="choose one of engine, recompute, decoupled"):
        OffPolicyConfig("trainer")
    with pytest.raises(ValueError, match="seq_mask_bound"):
        OffPolicyConfig("recompute", None, 0.0)
