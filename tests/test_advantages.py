"""Per-turn credit for GSPO-token: returns-to-go over turn rewards, normalised in the group, and
what reaches the learner's batch (values pinned by hand) and the loss's gradient."""

from __future__ import annotations

import math

import pytest
import torch

from gspo_agents.advantages import group_advantages, turn_advantages, turn_returns
from gspo_agents.batching import has_signal, prepare_batch, segment_turn_rewards
from gspo_agents.objectives import policy_loss
from gspo_agents.trajectory import Status, Trajectory


def multi_turn(group: str, turn_rewards: list[float], tokens_per_turn: int = 2) -> Trajectory:
    t = Trajectory(prompt_ids=[1, 2], group_id=group)
    for k in range(len(turn_rewards)):
        t.append_model([10 + k] * tokens_per_turn, [-0.5] * tokens_per_turn, version=0)
        if k < len(turn_rewards) - 1:
            t.append_env([5])
    t.turn_rewards = list(turn_rewards)
    t.status, t.reward, t.num_turns = Status.COMPLETE, float(sum(turn_rewards)), len(turn_rewards)
    return t


def turn_values(batch, row: int) -> list[float]:
    """The advantage on each model turn of a row (constant within the turn, checked)."""
    mask = batch.loss_mask_BT[row].bool()
    adv = batch.advantages_BT[row]
    out, t = [], 0
    T = mask.shape[0]
    while t < T:
        if mask[t]:
            start = t
            while t < T and mask[t]:
                t += 1
            values = adv[start:t]
            assert torch.all(values == values[0])
            out.append(float(values[0]))
        else:
            t += 1
    return out


def test_returns_to_go_with_discount():
    assert turn_returns([1.0, 0.0, 2.0], 1.0) == [3.0, 2.0, 2.0]
    assert turn_returns([1.0, 0.0, 2.0], 0.5) == pytest.approx([1.5, 1.0, 2.0])
    assert turn_returns([0.0, 0.0, 1.0], 0.0) == [0.0, 0.0, 1.0]


def test_turn_advantages_pool_every_turn_of_the_group():
    # group a: returns [3, 2, 2] and [0, 0, 0] (gamma 1): pooled mean 7/6
    out = turn_advantages([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [1.0]], ["a", "a", "b"], eps=0.0)
    pooled = torch.tensor([3.0, 2.0, 2.0, 0.0, 0.0, 0.0])
    mean, std = pooled.mean(), pooled.std(unbiased=False)
    expected = ((pooled - mean) / std).tolist()
    assert out.advantages[0] + out.advantages[1] == pytest.approx(expected, rel=1e-6)
    assert out.advantages[2] == [0.0]  # a group of one: no signal
    assert out.zero_spread_B.tolist() == [False, False, True]
    assert (out.num_groups, out.num_zero_spread_groups) == (2, 1)


def test_one_turn_per_episode_is_the_sequence_advantage():
    rewards = [1.0, 0.0, 0.5, 0.25, 2.0]
    groups = ["x", "x", "x", "y", "y"]
    seq = group_advantages(rewards, groups).advantages_B.tolist()
    turns = turn_advantages([[r] for r in rewards], groups).advantages
    assert [a[0] for a in turns] == pytest.approx(seq, rel=1e-6)


def test_terminal_reward_undiscounted_credits_every_turn_equally():
    # the "advantage to the first turn only" mutation gives later turns 0 here
    out = turn_advantages([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], ["g", "g"], eps=0.0)
    assert out.advantages == [[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]


def test_discount_and_std_toggle():
    out = turn_advantages([[0.0, 1.0], [0.0, 0.0]], ["g", "g"], gamma=0.5, normalize_std=False)
    # returns [0.5, 1.0] and [0, 0]: mean 0.375, no division
    assert out.advantages == [pytest.approx([0.125, 0.625]), pytest.approx([-0.375, -0.375])]
    seq = group_advantages([2.0, 0.0], ["g", "g"], normalize_std=False)
    assert seq.advantages_B.tolist() == [1.0, -1.0]
    with pytest.raises(ValueError, match="gamma"):
        turn_advantages([[1.0]], ["g"], gamma=1.5)


def test_prepare_batch_puts_each_turns_return_on_its_tokens():
    groups = [[multi_turn("a", [0.0, 1.0, 0.0]), multi_turn("a", [0.0, 0.0, 1.0])]]
    prep = prepare_batch(groups, pad_id=0, per_turn=True)
    # returns [1, 1, 0] and [1, 1, 1]: pooled mean 5/6, std sqrt(5)/6
    std = math.sqrt(5) / 6
    hi, lo = (1 - 5 / 6) / std, (0 - 5 / 6) / std
    assert turn_values(prep.batch, 0) == pytest.approx([hi, hi, lo], rel=1e-5)
    assert turn_values(prep.batch, 1) == pytest.approx([hi, hi, hi], rel=1e-5)
    # the same episodes as sequences: equal rewards, zero spread, nothing to train
    assert prepare_batch(groups, pad_id=0).batch is None


def test_prepare_batch_credits_later_turns_not_only_the_first():
    groups = [[multi_turn("a", [0.0, 0.0, 1.0]), multi_turn("a", [0.0, 0.0, 0.0])]]
    prep = prepare_batch(groups, pad_id=0, per_turn=True)
    a = 1.0 / (1.0 + 1e-6)
    assert turn_values(prep.batch, 0) == pytest.approx([a, a, a], rel=1e-5)
    assert turn_values(prep.batch, 1) == pytest.approx([-a, -a, -a], rel=1e-5)
    discounted = prepare_batch(groups, pad_id=0, per_turn=True, turn_discount=0.5)
    first, second, third = turn_values(discounted.batch, 0)
    assert first < second < third  # later turns are closer to the reward


def test_segment_turn_rewards_handle_missing_and_empty_turns():
    t = multi_turn("a", [0.0, 1.0])
    assert segment_turn_rewards(t) == [0.0, 1.0]
    t.turn_rewards.append(0.5)  # a last turn that produced no tokens folds into the last segment
    assert segment_turn_rewards(t) == [0.0, 1.5]
    t.turn_rewards = []  # built without turn rewards: the episode reward, at the end
    assert segment_turn_rewards(t) == [0.0, 1.0]
    t.turn_rewards = [1.0]
    with pytest.raises(ValueError, match="2 model turns but 1 turn rewards"):
        segment_turn_rewards(t)


def test_per_turn_gradient_differs_from_the_sequence_gradient():
    """On a constructed batch GSPO-token's gradient is the per-turn one, pinned by hand, and not
    GSPO's: d loss / d lp_t = -A_t / (|y| N) at s = 1 (unclipped, on-policy)."""
    groups = [[multi_turn("a", [1.0, 0.0]), multi_turn("a", [0.0, 0.0])]]
    tok = prepare_batch(groups, pad_id=0, per_turn=True).batch
    seq = prepare_batch(groups, pad_id=0).batch
    lp = tok.old_logprobs_BT.clone().requires_grad_(True)
    loss, _ = policy_loss(
        lp, tok.old_logprobs_BT, tok.advantages_BT, tok.loss_mask_BT, algorithm="gspo_token"
    )
    (grad_tok,) = torch.autograd.grad(loss, lp)
    expected = -tok.advantages_BT * tok.loss_mask_BT / (4 * 2)  # 4 model tokens, 2 sequences
    torch.testing.assert_close(grad_tok, expected, rtol=1e-6, atol=1e-8)
    lp2 = seq.old_logprobs_BT.clone().requires_grad_(True)
    loss2, _ = policy_loss(
        lp2, seq.old_logprobs_BT, seq.advantages_BT, seq.loss_mask_BT, algorithm="gspo"
    )
    (grad_seq,) = torch.autograd.grad(loss2, lp2)
    # the sequence gradient is flat over a row's turns; the per-turn one is not
    row0 = grad_tok[0][tok.loss_mask_BT[0].bool()]
    assert row0[0] != row0[-1]
    assert not torch.allclose(grad_tok, grad_seq)


def test_overlong_penalty_and_filter():
    cut = multi_turn("a", [1.0])
    cut.info["last_finish"] = "length"
    ok = multi_turn("a", [1.0])
    wrong = multi_turn("a", [0.0])
    groups = [[cut, ok, wrong]]
    plain = prepare_batch(groups, pad_id=0)
    assert plain.metrics["overlong_frac"] == pytest.approx(1 / 3)
    penalised = prepare_batch(groups, pad_id=0, overlong_penalty=1.0)
    assert penalised.metrics["reward_mean"] == pytest.approx(2 / 3)  # the env's, unpenalised
    adv = penalised.batch.advantages_BT[:, 2].tolist()  # rewards 0, 1, 0
    assert adv[1] > 0 and adv[0] == pytest.approx(adv[2])
    filtered = prepare_batch(groups, pad_id=0, overlong_filter=True)
    assert filtered.metrics["num_trained_seqs"] == 2  # the cut one is out of the loss
    assert filtered.trajectories == [ok, wrong]


def test_has_signal_for_dynamic_sampling():
    assert has_signal([multi_turn("a", [1.0]), multi_turn("a", [0.0])])
    assert not has_signal([multi_turn("a", [1.0]), multi_turn("a", [1.0])])
    same_total = [multi_turn("a", [1.0, 0.0]), multi_turn("a", [0.0, 1.0])]
    assert not has_signal(same_total)
    assert has_signal(same_total, per_turn=True)  # per turn, the credit differs
    cut = multi_turn("a", [1.0])
    cut.info["last_finish"] = "length"
    assert has_signal([cut, multi_turn("a", [1.0])], overlong_penalty=0.5)
