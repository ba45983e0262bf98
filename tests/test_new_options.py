"""The standard options added in issue 27, each against a formula written out here: KL to a frozen
reference (k1/k2/k3), the entropy bonus, dual clip, Dr. GRPO's constant normaliser, sequence-
product importance weights, DAPO's soft overlong buffer, masking of stale tokens, and several
passes over a batch; through the learner where the option lives there."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_advantages import multi_turn, turn_values

from gspo_agents.batching import overlong_buffer_penalty, prepare_batch
from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.logprobs import token_entropy
from gspo_agents.models import LoraConfig
from gspo_agents.objectives import kl_penalty, policy_loss
from gspo_agents.offpolicy import OffPolicyConfig, behaviour_weights

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

MASK = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
OLD = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -0.5, -1.5, -1.0]])
REF = torch.tensor([[0.0, -1.5, -1.0, 0.0], [0.0, -0.5, -2.5, -0.2]])
ADV = torch.tensor([1.0, -2.0])
N_TOK = [2, 3]


def _model_tokens(row: int) -> list[int]:
    return [t for t in range(4) if MASK[row, t] > 0]


def _hand_kl(lp: float, ref: float, k: str) -> float:
    log_r = ref - lp
    return {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": math.exp(log_r) - 1 - log_r}[k]


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_penalty_value_and_gradient_by_hand(estimator):
    lp = OLD.clone().requires_grad_(True)  # on-policy: the policy term is -mean_i A_i
    coef = 0.3
    loss, m = policy_loss(
        lp, OLD, ADV, MASK, algorithm="grpo", ref_logprobs=REF, kl_coef=coef, kl_estimator=estimator
    )
    kl_seq = [
        sum(_hand_kl(float(OLD[i, t]), float(REF[i, t]), estimator) for t in _model_tokens(i))
        / N_TOK[i]
        for i in range(2)
    ]
    expected = -(1.0 - 2.0) / 2 + coef * sum(kl_seq) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    kl_tokens = [
        _hand_kl(float(OLD[i, t]), float(REF[i, t]), estimator)
        for i in range(2)
        for t in _model_tokens(i)
    ]
    assert float(m["kl_ref"]) == pytest.approx(sum(kl_tokens) / 5, rel=1e-6)
    (grad,) = torch.autograd.grad(loss, lp)
    # d/d lp of each estimator, with log r = ref - lp
    d = {
        "k1": lambda lr: 1.0,
        "k2": lambda lr: -lr,
        "k3": lambda lr: 1.0 - math.exp(lr),
    }[estimator]
    for i in range(2):
        for t in _model_tokens(i):
            lr = float(REF[i, t] - OLD[i, t])
            want = (-float(ADV[i]) + coef * d(lr)) / (N_TOK[i] * 2)
            assert float(grad[i, t]) == pytest.approx(want, rel=1e-5, abs=1e-7)
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(OLD, REF, "k4")


def test_k3_is_clamped_as_verl_clamps_it():
    # log r = ref - lp: -30 and +9 are past the bounds, +-1 inside them
    lp = torch.tensor([[0.0, 0.0, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-30.0, 9.0, 1.0, -1.0]])
    k3 = kl_penalty(lp, ref, "k3")
    inside = [math.exp(x) - 1 - x for x in (1.0, -1.0)]
    # log r clamped to -20 gives 19 before the cap of 10; +9 gives 8,093 before it
    assert k3.tolist()[0] == pytest.approx([10.0, 10.0, *inside], rel=1e-6)
    (g,) = torch.autograd.grad(k3.sum(), lp)
    assert g.tolist()[0] == pytest.approx([0.0, 0.0, 1 - math.e, 1 - math.exp(-1.0)], rel=1e-6)
    # k1 and k2 are not clamped (verl clamps neither)
    assert kl_penalty(lp, ref, "k2").tolist()[0][0] == pytest.approx(450.0)


def test_entropy_bonus_and_token_entropy_by_hand():
    logits = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 1.0, -1.0], [0.5, 0.0, 0.0]]])
    ent = token_entropy(logits, temperature=2.0)

    def h(row):
        z = [x / 2.0 for x in row]
        s = sum(math.exp(x) for x in z)
        return -sum(math.exp(x) / s * (x - math.log(s)) for x in z)

    assert ent.tolist()[0] == pytest.approx([0.0, h([0.0, 1.0, 2.0]), h([1.0, 1.0, -1.0])])
    entropy = torch.tensor([[0.0, 0.7, 0.1, 0.0], [0.0, 0.2, 0.3, 1.0]], requires_grad=True)
    lp = OLD.clone().requires_grad_(True)
    coef = 0.05
    loss, m = policy_loss(lp, OLD, ADV, MASK, algorithm="gspo", entropy=entropy, entropy_coef=coef)
    seq_mean = [(0.7 + 0.1) / 2, (0.2 + 0.3 + 1.0) / 3]
    assert loss.item() == pytest.approx(0.5 - coef * sum(seq_mean) / 2, rel=1e-6)
    assert float(m["entropy"]) == pytest.approx((0.7 + 0.1 + 0.2 + 0.3 + 1.0) / 5, rel=1e-6)
    (g,) = torch.autograd.grad(loss, entropy)
    torch.testing.assert_close(g, -coef * MASK / (torch.tensor(N_TOK)[:, None] * 2))


def test_dual_clip_bounds_negative_advantage_terms_at_c_times_a():
    old = torch.zeros(1, 3)
    lp = torch.tensor([[math.log(5.0), math.log(2.0), math.log(5.0)]], requires_grad=True)
    adv = torch.tensor([[-1.0, -1.0, 1.0]])
    mask = torch.ones(1, 3)
    loss, m = policy_loss(lp, old, adv, mask, algorithm="grpo", clip_ratio_c=3.0)
    # token 0: min(5·-1, 1.27·-1) = -5, dual clip -> max(-5, 3·-1) = -3 (no gradient)
    # token 1: min(-2, -1.27) = -2 > -3: unchanged; token 2: A > 0, min(5, 1.27) = 1.27 clipped
    assert loss.item() == pytest.approx(-(-3.0 - 2.0 + 1.27) / 3, rel=1e-6)
    assert float(m["dual_clip_frac_tokens"]) == pytest.approx(1 / 3)
    (g,) = torch.autograd.grad(loss, lp)
    assert g.tolist()[0] == pytest.approx([0.0, 2.0 / 3, 0.0])  # d(-(rA)/3)/dlp = -rA/3
    plain, _ = policy_loss(lp, old, adv, mask, algorithm="grpo")
    assert plain.item() == pytest.approx(-(-5.0 - 2.0 + 1.27) / 3, rel=1e-6)
    with pytest.raises(ValueError, match="algorithm=grpo"):
        policy_loss(lp, old, adv, mask, algorithm="gspo", clip_ratio_c=3.0)
    with pytest.raises(ValueError, match="> 1"):
        policy_loss(lp, old, adv, mask, algorithm="grpo", clip_ratio_c=0.5)


@pytest.mark.parametrize("algorithm", ["gspo", "gspo_token", "grpo"])
def test_dr_grpo_normaliser_is_a_constant_token_count(algorithm):
    lp = OLD.clone().requires_grad_(True)
    loss, _ = policy_loss(
        lp, OLD, ADV, MASK, algorithm=algorithm, loss_agg="seq-mean-token-sum-norm", norm_tokens=10
    )
    # at ratio 1 every token's term is A_i: sum_i n_i A_i / (N x 10)
    assert loss.item() == pytest.approx(-(2 * 1.0 + 3 * -2.0) / (2 * 10), rel=1e-6)
    (g,) = torch.autograd.grad(loss, lp)
    torch.testing.assert_close(g, -(ADV[:, None] * MASK) / 20)
    with pytest.raises(ValueError, match="norm_tokens"):
        policy_loss(lp, OLD, ADV, MASK, loss_agg="seq-mean-token-sum-norm")


def test_sequence_product_weights_are_exp_of_the_summed_log_ratio():
    trainer = OLD + torch.tensor([[0.0, 0.1, 0.2, 0.0], [0.0, -0.1, 0.0, 0.3]])
    cfg = OffPolicyConfig("decoupled", seq_is_ratio="product")
    for level in ("sequence", "token"):
        w, _ = behaviour_weights(trainer, OLD, MASK, cfg, level)
        want = [math.exp(0.1 + 0.2), math.exp(-0.1 + 0.0 + 0.3)]
        for i in range(2):
            assert w[i][MASK[i].bool()].tolist() == pytest.approx([want[i]] * N_TOK[i], rel=1e-6)
    capped, _ = behaviour_weights(trainer, OLD, MASK, replace(cfg, seq_is_cap=1.3), "sequence")
    assert float(capped[0, 1]) == pytest.approx(1.3) and float(capped[1, 1]) == pytest.approx(
        math.exp(0.2)
    )
    masked, _ = behaviour_weights(
        trainer,
        OLD,
        MASK,
        OffPolicyConfig("recompute", seq_mask_bound=0.16, seq_is_ratio="product"),
        "sequence",
    )
    # |sum log-ratio| 0.3 and 0.2 both exceed 0.16 (the geometric means 0.15 and 0.067 would not)
    assert masked.sum() == 0.0
    kept, _ = behaviour_weights(
        trainer, OLD, MASK, OffPolicyConfig("recompute", seq_mask_bound=0.16), "sequence"
    )
    assert kept.sum() == MASK.sum()
    with pytest.raises(ValueError, match="geometric, product"):
        OffPolicyConfig("decoupled", seq_is_ratio="prod")
    with pytest.raises(ValueError, match="decoupled, seq_is_cap or seq_mask_bound"):
        OffPolicyConfig("engine", seq_is_ratio="product")


def test_dapo_overlong_buffer_ramp_and_its_place_in_the_rewards():
    # L_max 20, buffer 5: free up to 15, then (15 - |y|) / 5, -1 past 20
    assert [overlong_buffer_penalty(n, 20, 5) for n in (10, 15, 17, 20, 21)] == pytest.approx(
        [0.0, 0.0, -0.4, -1.0, -1.0]
    )
    assert overlong_buffer_penalty(19, 20, 0) == 0.0
    short = multi_turn("a", [1.0], tokens_per_turn=3)  # 3 of 4 tokens: in the buffer of 2
    long = multi_turn("a", [1.0], tokens_per_turn=4)  # 4 of 4: -1
    free = multi_turn("a", [1.0], tokens_per_turn=2)  # 2 of 4: free
    prep = prepare_batch(
        [[short, long, free]],
        pad_id=0,
        overlong_buffer=2,
        max_new_tokens_per_turn=4,
        normalize_std=False,
    )
    rewards = [1.0 - 0.5, 1.0 - 1.0, 1.0]
    mean = sum(rewards) / 3
    assert [turn_values(prep.batch, r)[0] for r in range(3)] == pytest.approx(
        [x - mean for x in rewards]
    )
    # two turns: the budget is 2 x 4 tokens, 7 model tokens are 1 into the buffer of 2
    two = multi_turn("b", [0.0, 1.0], tokens_per_turn=4)
    (
        two.segments[-1].token_ids.pop(),
        two.segments[-1].logprobs.pop(),
        two.segments[-1].versions.pop(),
    )
    other = multi_turn("b", [0.0, 1.0], tokens_per_turn=2)
    prep = prepare_batch(
        [[two, other]],
        pad_id=0,
        per_turn=True,
        overlong_buffer=2,
        max_new_tokens_per_turn=4,
        normalize_std=False,
    )
    # two's turn rewards [0, 1 - 0.5] -> returns [0.5, 0.5]; other's [1, 1]; pooled mean 0.75
    assert turn_values(prep.batch, 0) == pytest.approx([-0.25, -0.25])
    assert turn_values(prep.batch, 1) == pytest.approx([0.25, 0.25])


def test_max_version_lag_masks_only_the_stale_tokens_of_a_partial_rollout():
    partial = multi_turn("a", [1.0, 0.0], tokens_per_turn=2)
    partial.segments[0].versions = [0, 0]  # made before two weight updates
    partial.segments[2].versions = [2, 3]
    fresh = multi_turn("a", [0.0, 0.0], tokens_per_turn=2)
    for seg in (fresh.segments[0], fresh.segments[2]):
        seg.versions = [3, 3]
    plain = prepare_batch([[partial, fresh]], pad_id=0)
    lagged = prepare_batch([[partial, fresh]], pad_id=0, current_version=3, max_version_lag=1)
    # tokens: prompt(2) turn(2) env(1) turn(2); version 0 lags 3 > 1: masked; 2 and 3 stay
    assert plain.batch.loss_mask_BT[0].tolist() == [0, 0, 1, 1, 0, 1, 1]
    assert lagged.batch.loss_mask_BT[0].tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert lagged.batch.loss_mask_BT[1].tolist() == plain.batch.loss_mask_BT[1].tolist()
    assert lagged.metrics["stale_token_frac"] == pytest.approx(2 / 8)
    assert torch.equal(lagged.batch.advantages_BT, plain.batch.advantages_BT)


# --------------------------------------------------------------------------------------------
# through the learner
# --------------------------------------------------------------------------------------------
CFG = LearnerConfig(algorithm="gspo", lr=3e-3, num_minibatches=1, micro_batch_tokens=256)


def _batch(learner, seed=3, noise=0.0):
    b = synthetic_batch(seed)
    return with_old_logprobs(b, learner.compute_logprobs(b), noise=noise, seed=seed)


def test_kl_reference_is_the_starting_model_and_its_penalty_reaches_the_loss(dense_dir):
    learner = Learner(dense_dir, replace(CFG, kl_coef=0.1, kl_estimator="k3"))
    batch = _batch(learner)
    first = learner.update(batch)
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-9)  # the policy starts AT the reference
    policy_lp = learner.compute_logprobs(batch)
    second = learner.update(batch)
    learner.close()
    fresh = Learner(dense_dir, CFG)  # the starting weights, computed independently
    ref_lp = fresh.compute_logprobs(batch)
    fresh.close()
    mask = batch.loss_mask_BT.bool()
    log_r = (ref_lp - policy_lp)[mask].double()
    k3 = (log_r.exp() - 1 - log_r).mean()
    assert float(k3) > 1e-8
    assert second["kl_ref"] == pytest.approx(float(k3), rel=1e-3)


def test_entropy_bonus_reaches_the_loss_through_the_learner(dense_dir):
    learner = Learner(dense_dir, replace(CFG, entropy_coef=0.01))
    batch = _batch(learner)
    with torch.no_grad():
        logits = learner.model(
            input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT
        ).logits[:, :-1]
    p = torch.softmax(logits.double(), dim=-1)
    ent_BT = torch.nn.functional.pad(-(p * p.log()).sum(-1), (1, 0))
    mask = batch.loss_mask_BT.bool()
    m = learner.update(batch)
    learner.close()
    assert m["entropy"] == pytest.approx(float(ent_BT[mask].mean()), rel=1e-4)
    seq = [float(ent_BT[i][mask[i]].mean()) for i in range(batch.num_sequences)]
    adv = [float(batch.advantages_BT[i][mask[i]][0]) for i in range(batch.num_sequences)]
    N = batch.num_sequences
    assert m["loss"] == pytest.approx(-sum(adv) / N - 0.01 * sum(seq) / N, rel=1e-4, abs=1e-6)


@pytest.mark.slow  # 44 s under load (a full suite test)
def test_ppo_epochs_is_that_many_passes_against_the_same_anchor(dense_dir):
    cfg = replace(CFG, num_minibatches=2)
    twice = Learner(dense_dir, replace(cfg, ppo_epochs=2))
    batch = _batch(twice, noise=0.01)
    m = twice.update(batch)
    w_twice = {k: v.detach().clone() for k, v in twice.model.state_dict().items()}
    twice.close()
    assert m["optimizer_steps"] == 4 and m["num_minibatches"] == 4
    # with the engine anchor, two epochs are two updates on the same batch
    once = Learner(dense_dir, cfg)
    once.update(batch)
    once.update(batch)
    w_once = {k: v.detach().clone() for k, v in once.model.state_dict().items()}
    once.close()
    assert max(float((w_twice[k] - w_once[k]).abs().max()) for k in w_once) < 1e-6


# --------------------------------------------------------------------------------------------
# through train.py
# --------------------------------------------------------------------------------------------
def test_train_builds_the_learner_with_every_option_of_the_config(moe_dir):
    from test_config import compose_run

    from gspo_agents import train

    cfg = compose_run(
        "algorithm=grpo",
        "algorithm.eps_low=0.1",
        "algorithm.eps_high=0.3",
        "algorithm.loss_agg=seq-mean-token-sum-norm",
        "algorithm.old_logprobs=recompute",
        "algorithm.seq_is_cap=2.0",
        "algorithm.seq_mask_bound=0.5",
        "algorithm.seq_is_ratio=product",
        "algorithm.clip_ratio_c=3.0",
        "algorithm.kl_coef=0.2",
        "algorithm.kl_estimator=k2",
        "algorithm.entropy_coef=0.01",
        "algorithm.routing_replay=true",
        "algorithm.routing_replay_source=engine",
        "trainer.lr=0.002",
        "trainer.weight_decay=0.1",
        "trainer.warmup_steps=3",
        "trainer.max_grad_norm=0.5",
        "trainer.num_minibatches=3",
        "trainer.ppo_epochs=2",
        "trainer.micro_batch_tokens=512",
        "trainer.share_prompt_prefix=true",
        "trainer.logprob_chunk_tokens=64",
        "trainer.packing=off",
        "trainer.activation_checkpointing=true",
        "trainer.seed=5",
        "rollout.temperature=0.7",
        "rollout.max_context_tokens=96",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "model.lora.target_modules=[q_proj,v_proj]",
        "model.lora.dropout=0.1",
    )
    learner = train.build_learner(cfg, moe_dir)
    got = learner.cfg
    learner.close()
    want = LearnerConfig(
        algorithm="grpo",
        eps_low=0.1,
        eps_high=0.3,
        lr=0.002,
        weight_decay=0.1,
        warmup_steps=3,
        max_grad_norm=0.5,
        num_minibatches=3,
        micro_batch_tokens=512,
        share_prompt_prefix=True,
        logprob_chunk_tokens=64,
        packing="off",
        activation_checkpointing=True,
        temperature=0.7,
        seed=5,
        loss_agg="seq-mean-token-sum-norm",
        old_logprobs="recompute",
        seq_is_cap=2.0,
        seq_mask_bound=0.5,
        seq_is_ratio="product",
        routing_replay=True,
        routing_replay_source="engine",
        loss_norm_tokens=96,
        clip_ratio_c=3.0,
        kl_coef=0.2,
        kl_estimator="k2",
        entropy_coef=0.01,
        ppo_epochs=2,
        lora=LoraConfig(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj"), dropout=0.1),
    )
    assert got == want
    # every field train.py sets differs from the learner's default, so a dropped one shows
    unset = {"betas", "mixed_precision"}  # not run config keys
    default = LearnerConfig()
    same = [f for f in LearnerConfig.__dataclass_fields__ if f not in unset]
    assert [f for f in same if getattr(want, f) == getattr(default, f)] == []
