"""Objectives against hand computation and independent per-sequence references."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from gspo_agents.objectives import group_advantages, policy_loss

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from launch import torchrun  # noqa: E402
from objective_data import loss_and_grad, make_problem  # noqa: E402

# Two sequences, T=4. Row 0: prompt token, 2 model tokens, 1 pad. Row 1: 3 model tokens.
MASK = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
OLD = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -0.5, -1.5, -1.0]])
DIFF = torch.tensor([[0.0, 0.1, -0.3, 0.0], [0.0, 0.5, 0.2, 0.5]])  # lp - old on model tokens


def _lp(diff=DIFF, old=OLD) -> torch.Tensor:
    return (old + diff).clone().requires_grad_(True)


def _clip_term(r: float, a: float, lo: float, hi: float) -> float:
    return min(r * a, min(max(r, 1 - lo), 1 + hi) * a)


# --------------------------------------------------------------------------------------------
# hand-computed values
# --------------------------------------------------------------------------------------------
def test_gspo_value_matches_hand_computation():
    adv = torch.tensor([1.0, 2.0])
    loss, m = policy_loss(_lp(), OLD, adv, MASK, algorithm="gspo", eps_low=0.2, eps_high=0.27)
    s0 = math.exp((0.1 - 0.3) / 2)  # 0.905: inside the clip range
    s1 = math.exp((0.5 + 0.2 + 0.5) / 3)  # 1.492 > 1.27 with A > 0: clipped
    expected = -(s0 * 1.0 + 1.27 * 2.0) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert m["clip_frac_seqs"].item() == pytest.approx(0.5)
    assert m["clip_frac_tokens"].item() == pytest.approx(
        3 / 5
    )  # the clipped sequence has 3 of 5 tokens
    assert m["ratio_min"].item() == pytest.approx(s0, rel=1e-6)
    assert m["ratio_max"].item() == pytest.approx(s1, rel=1e-6)
    assert m["ratio_mean"].item() == pytest.approx((s0 + s1) / 2, rel=1e-6)
    kl = [math.expm1(d) - d for d in (0.1, -0.3, 0.5, 0.2, 0.5)]
    assert m["approx_kl"].item() == pytest.approx(sum(kl) / 5, rel=1e-5)


def test_gspo_uses_the_algorithm_default_clip_range():
    adv = torch.tensor([1.0, -1.0])
    loss, m = policy_loss(_lp(), OLD, adv, MASK)  # gspo, eps 3e-4 / 4e-4
    s0, s1 = math.exp(-0.1), math.exp(0.4)
    # s0 < 1 - 3e-4 but A > 0: unclipped side; s1 > 1 + 4e-4 but A < 0: unclipped side.
    assert loss.item() == pytest.approx(-(s0 - s1) / 2, rel=1e-6)
    assert m["clip_frac_seqs"].item() == 0.0
    loss2, m2 = policy_loss(_lp(), OLD, -adv, MASK)
    assert loss2.item() == pytest.approx(-(-(1 - 3e-4) + (1 + 4e-4)) / 2, abs=1e-7)
    assert m2["clip_frac_seqs"].item() == 1.0


def test_grpo_value_matches_hand_computation_with_default_clip():
    adv = torch.tensor([1.0, -1.0])
    loss, m = policy_loss(_lp(), OLD, adv, MASK, algorithm="grpo")  # 0.2 / 0.27
    row0 = [_clip_term(math.exp(d), 1.0, 0.2, 0.27) for d in (0.1, -0.3)]
    row1 = [_clip_term(math.exp(d), -1.0, 0.2, 0.27) for d in (0.5, 0.2, 0.5)]
    expected = -(sum(row0) / 2 + sum(row1) / 3) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # A < 0 never clips above 1; A > 0 clips above 1.27 only: no token clipped here
    assert m["clip_frac_tokens"].item() == 0.0
    loss2, m2 = policy_loss(_lp(), OLD, -adv, MASK, algorithm="grpo")
    # now row 0 (A<0) clips its 0.741 token (< 0.8), row 1 (A>0) its two 1.65 tokens (> 1.27)
    assert m2["clip_frac_tokens"].item() == pytest.approx(3 / 5)
    assert m2["clip_frac_seqs"].item() == 1.0
    assert m2["ratio_max"].item() == pytest.approx(math.exp(0.5), rel=1e-6)


def test_gspo_token_uses_per_turn_advantages():
    adv_BT = torch.tensor([[0.0, 1.0, -2.0, 0.0], [0.0, 0.5, 0.5, 0.5]])
    loss, _ = policy_loss(
        _lp(), OLD, adv_BT, MASK, algorithm="gspo_token", eps_low=0.2, eps_high=0.3
    )
    s0, s1 = math.exp(-0.1), math.exp(0.4)
    row0 = (_clip_term(s0, 1.0, 0.2, 0.3) + _clip_term(s0, -2.0, 0.2, 0.3)) / 2
    row1 = _clip_term(s1, 0.5, 0.2, 0.3)
    assert loss.item() == pytest.approx(-(row0 + row1) / 2, rel=1e-6)


def test_gspo_rejects_per_token_advantages_with_a_pointer_to_gspo_token():
    adv_BT = torch.tensor([[0.0, 1.0, -2.0, 0.0], [0.0, 0.5, 0.5, 0.5]])
    with pytest.raises(ValueError, match="gspo_token"):
        policy_loss(_lp(), OLD, adv_BT, MASK, algorithm="gspo")


def test_unknown_algorithm_names_the_choices():
    with pytest.raises(ValueError, match=r"did you mean 'gspo'.*gspo, gspo_token, grpo"):
        policy_loss(_lp(), OLD, torch.ones(2), MASK, algorithm="gpso")


# --------------------------------------------------------------------------------------------
# structural properties
# --------------------------------------------------------------------------------------------
def _random_case(seed: int, B: int = 5, T: int = 12, scale: float = 1e-3):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3
    lp = (old + scale * torch.randn(B, T, generator=g)).requires_grad_(True)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    mask[:, 0] = 0.0
    adv = torch.randn(B, generator=g)
    return lp, old, adv, mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_token_equals_gspo_with_sequence_advantages(seed):
    lp, old, adv, mask = _random_case(seed)  # log-ratio noise 1e-3: some sequences clip
    loss_a, m_a = policy_loss(lp, old, adv, mask, algorithm="gspo")
    (grad_a,) = torch.autograd.grad(loss_a, lp)
    lp_b = lp.detach().clone().requires_grad_(True)
    adv_BT = adv[:, None].expand_as(lp).clone()
    loss_b, m_b = policy_loss(lp_b, old, adv_BT, mask, algorithm="gspo_token")
    (grad_b,) = torch.autograd.grad(loss_b, lp_b)
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_a, grad_b, rtol=1e-5, atol=1e-8)
    assert grad_a.abs().sum() > 0
    assert m_a["clip_frac_tokens"] == m_b["clip_frac_tokens"]


def test_gspo_ratio_is_length_normalized():
    # the same per-token log-ratio over 2 or 6 tokens gives the same sequence ratio exp(0.05)
    old = torch.zeros(2, 7)
    mask = torch.zeros(2, 7)
    mask[0, 1:3] = 1.0
    mask[1, 1:7] = 1.0
    lp = (old + 0.05 * mask).requires_grad_(True)
    loss, m = policy_loss(lp, old, torch.ones(2), mask, algorithm="gspo", eps_high=1.0)
    assert m["ratio_min"].item() == pytest.approx(math.exp(0.05), rel=1e-6)
    assert m["ratio_max"].item() == pytest.approx(math.exp(0.05), rel=1e-6)
    (grad,) = torch.autograd.grad(loss, lp)
    # each token's gradient is s_i / (n_i · N): three times smaller in the three-times-longer row
    assert grad[0, 1].item() == pytest.approx(-math.exp(0.05) / (2 * 2), rel=1e-6)
    assert grad[1, 1].item() == pytest.approx(-math.exp(0.05) / (6 * 2), rel=1e-6)


@pytest.mark.parametrize("algorithm", ["gspo", "gspo_token", "grpo"])
@pytest.mark.parametrize(
    ("log_ratio", "adv", "grad_flows"),
    [
        (0.5, +1.0, False),  # ratio above 1+eps, A > 0: clipped, no gradient
        (0.5, -1.0, True),  # ratio above 1+eps, A < 0: the unclipped term is the min
        (-0.5, -1.0, False),  # ratio below 1-eps, A < 0: clipped
        (-0.5, +1.0, True),  # ratio below 1-eps, A > 0: unclipped
    ],
)
def test_clipping_only_on_the_side_the_advantage_sign_makes_active(
    algorithm, log_ratio, adv, grad_flows
):
    old = torch.full((1, 4), -1.0)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    lp = (old + log_ratio * mask).requires_grad_(True)
    loss, m = policy_loss(lp, old, torch.tensor([adv]), mask, algorithm=algorithm)
    (grad,) = torch.autograd.grad(loss, lp)
    assert bool(grad.abs().sum() > 0) == grad_flows
    assert m["clip_frac_tokens"].item() == (0.0 if grad_flows else 1.0)
    assert m["clip_frac_seqs"].item() == (0.0 if grad_flows else 1.0)


@pytest.mark.parametrize("algorithm", ["gspo", "gspo_token", "grpo"])
def test_masked_tokens_change_nothing(algorithm):
    lp, old, adv, mask = _random_case(7, scale=0.1)
    loss, m = policy_loss(lp, old, adv, mask, algorithm=algorithm)
    (grad,) = torch.autograd.grad(loss, lp)
    # garbage (including NaN and inf) on masked positions of both current and behaviour log-probs
    junk = torch.where(mask.bool(), torch.zeros_like(old), torch.full_like(old, float("nan")))
    junk[:, 0] = float("-inf")
    lp2 = (lp.detach() + junk).requires_grad_(True)
    old2 = old + torch.where(mask.bool(), torch.zeros_like(old), torch.full_like(old, 37.0))
    loss2, m2 = policy_loss(lp2, old2, adv, mask, algorithm=algorithm)
    (grad2,) = torch.autograd.grad(loss2, lp2)
    torch.testing.assert_close(loss2, loss)
    torch.testing.assert_close(grad2, grad)
    assert torch.all(grad2[~mask.bool()] == 0)
    for k in m:
        torch.testing.assert_close(m2[k], m[k])


def test_sequence_without_model_tokens_contributes_nothing():
    lp, old, adv, mask = _random_case(3, scale=0.1)
    mask[2] = 0.0
    loss, m = policy_loss(lp, old, adv, mask, algorithm="gspo", num_sequences=5)
    keep = [0, 1, 3, 4]
    loss_k, _ = policy_loss(lp[keep], old[keep], adv[keep], mask[keep], num_sequences=5)
    torch.testing.assert_close(loss, loss_k)
    assert m["num_seqs"].item() == 4


@pytest.mark.parametrize("algorithm", ["gspo", "gspo_token", "grpo"])
def test_normalised_by_the_global_minibatch_size(algorithm):
    problem = make_problem()
    full_loss, full_grad = loss_and_grad(problem, algorithm, list(range(problem.batch_size)))
    parts = [loss_and_grad(problem, algorithm, rows) for rows in ([0, 2, 4], [1, 3, 5])]
    torch.testing.assert_close(parts[0][0] + parts[1][0], full_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(parts[0][1] + parts[1][1], full_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["gspo", "grpo"])
def test_two_gloo_processes_give_the_loss_and_gradient_of_one(algorithm, tmp_path):
    problem = make_problem()
    loss, grad = loss_and_grad(problem, algorithm, list(range(problem.batch_size)))
    out = tmp_path / "result.pt"
    torchrun("objective_allreduce.py", algorithm, str(out), nproc=2)
    result = torch.load(out)
    assert result["world"] == 2
    assert grad.abs().sum() > 0
    torch.testing.assert_close(result["loss"], loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(result["grad"], grad, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# advantages
# --------------------------------------------------------------------------------------------
def test_group_advantages_normalise_within_each_group():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 3.0]
    groups = ["a", "a", "a", "a", "b", "b", "c"]
    out = group_advantages(rewards, groups, eps=0.0)
    # group a: mean 0.5, population std 0.5
    torch.testing.assert_close(out.advantages_B[:4], torch.tensor([1.0, -1.0, -1.0, 1.0]))
    # group b has no spread, group c is a single sample: no signal, exactly zero
    assert out.advantages_B[4:].tolist() == [0.0, 0.0, 0.0]
    assert out.zero_spread_B.tolist() == [False] * 4 + [True] * 3
    assert (out.num_groups, out.num_zero_spread_groups) == (3, 2)
    assert out.zero_spread_frac == pytest.approx(2 / 3)


def test_group_advantages_eps_and_tensor_group_ids():
    out = group_advantages(torch.tensor([2.0, 4.0]), torch.tensor([7, 7]), eps=1.0)
    torch.testing.assert_close(out.advantages_B, torch.tensor([-0.5, 0.5]))  # (±1) / (1 + 1)


def test_group_advantages_reject_bad_input():
    with pytest.raises(ValueError, match="group ids"):
        group_advantages([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, float("nan")], ["a", "a"])
