"""Each algorithm option pinned THROUGH the learner: the gradient of every optimizer step of an
update equals the gradient of the loss written out here by hand, on batches built so that any
wrong wiring gives another gradient.

The batches make the options matter: the policy is moved away from the frozen reference (so π_old
≠ π_ref), the temperature is not 1, the engine's log-probs are noisy (importance weights ≠ 1,
dual clip active on both signs of the advantage), the update runs several minibatches and
`ppo_epochs` passes (the anchor must stay the one from before the update), and every loss
aggregation is used. The hand loss takes log-probs and entropies from a plain full-logits
forward of a separate copy of the model and aggregates per sequence in Python; it never calls
`gspo_agents.objectives` or the learner's forward.

Shape legend: B rows, T positions, V vocabulary.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from gspo_agents.learner import Learner, LearnerConfig

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

# clipping off (max_grad_norm=0): the recorded gradient is the loss's own
BASE = LearnerConfig(lr=2e-2, num_minibatches=2, micro_batch_tokens=64, max_grad_norm=0.0)
TOL = 1e-4  # relative error of the whole gradient (fp32 rounding, other summation order)


# --------------------------------------------------------------------------------------------
# the hand-written side
# --------------------------------------------------------------------------------------------
def _forward(model, batch, T: float, grad: bool = False):
    """Log-probs and entropies [B, T] of softmax(logits / T) from full logits (0 at t = 0)."""
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
        logp_BTV = torch.log_softmax(logits[:, :-1].float() / T, dim=-1)
        lp = logp_BTV.gather(-1, batch.input_ids_BT[:, 1:, None])[..., 0]
        ent = -(logp_BTV.exp() * logp_BTV).sum(-1)
    pad = torch.nn.functional.pad
    return pad(lp, (1, 0)), pad(ent, (1, 0))


def _aggregate(per_seq: list[list[torch.Tensor]], agg: str, norm_tokens: int) -> torch.Tensor:
    """A minibatch's per-token terms (one list per sequence) aggregated as `agg` says."""
    n_seq = len(per_seq)
    n_tok = sum(len(x) for x in per_seq)
    if agg == "seq-mean-token-mean":
        return sum(sum(x) / len(x) for x in per_seq) / n_seq
    if agg == "token-mean":
        return sum(sum(x) for x in per_seq) / n_tok
    assert agg == "seq-mean-token-sum-norm"
    return sum(sum(x) for x in per_seq) / (n_seq * norm_tokens)


def _hand_loss(c: LearnerConfig, batch, rows, lp, ent, anchor, engine, ref) -> torch.Tensor:
    """The update's loss on minibatch `rows`, term by term (lp, ent carry the gradient)."""
    if c.algorithm == "grpo":
        lo, hi = c.eps_low or 0.2, c.eps_high or 0.27
    else:
        lo, hi = c.eps_low or 3e-4, c.eps_high or 4e-4
    pol, kl, hh = [], [], []
    for i in rows:
        m = batch.loss_mask_BT[i].bool()
        a = float(batch.advantages_BT[i][m][0])
        lp_i, old_i, eng_i = lp[i][m], anchor[i][m], engine[i][m]
        prox = (old_i - eng_i).double()  # log pi_prox - log pi_engine, per token
        if c.algorithm == "grpo":
            r = torch.exp(lp_i - old_i)
            term = torch.minimum(r * a, r.clamp(1 - lo, 1 + hi) * a)
            if c.clip_ratio_c is not None and a < 0:
                term = torch.maximum(term, torch.full_like(term, c.clip_ratio_c * a))
            if c.seq_is_cap is not None:  # truncated IS, one weight per token
                term = term * prox.exp().clamp(max=c.seq_is_cap).float()
            pol.append(list(term))
        else:
            s = torch.exp((lp_i - old_i).mean())
            term = torch.minimum(s * a, s.clamp(1 - lo, 1 + hi) * a)
            if c.old_logprobs == "decoupled":  # one weight per sequence: exp(mean log-ratio)
                w = math.exp(float(prox.mean()))
                term = term * min(w, c.seq_is_cap or math.inf)
            pol.append([term] * int(m.sum()))
        if c.kl_coef:
            log_r = ref[i][m] - lp_i
            kl.append(list(torch.exp(log_r) - 1 - log_r))  # k3
        if c.entropy_coef:
            hh.append(list(ent[i][m]))
    L = c.loss_norm_tokens
    loss = -_aggregate(pol, c.loss_agg, L)
    if c.kl_coef:
        loss = loss + c.kl_coef * _aggregate(kl, c.loss_agg, L)
    if c.entropy_coef:
        loss = loss - c.entropy_coef * _aggregate(hh, c.loss_agg, L)
    return loss


def _hand_grad(model, params: dict, loss_fn) -> tuple[float, dict[str, torch.Tensor]]:
    model.load_state_dict(params, strict=False)
    model.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    return float(loss), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _rel_err(got: dict, want: dict) -> float:
    g = torch.cat([got[n].flatten() for n in want])
    w = torch.cat([want[n].flatten() for n in want])
    return float((g - w).norm() / w.norm())


# --------------------------------------------------------------------------------------------
# the learner side
# --------------------------------------------------------------------------------------------
def _record_steps(learner: Learner) -> list[tuple[dict, dict]]:
    """(parameters before the step, the gradient it applies) of every optimizer step."""
    steps: list[tuple[dict, dict]] = []
    step = learner.optimizer.step

    def spy(*args, **kwargs):
        named = list(learner.model.named_parameters())
        steps.append(
            (
                {n: p.detach().clone() for n, p in named},
                {n: p.grad.detach().clone() for n, p in named if p.grad is not None},
            )
        )
        return step(*args, **kwargs)

    spy._wrapped_by_lr_sched = True  # type: ignore[attr-defined]  # still counted by the scheduler
    learner.optimizer.step = spy  # type: ignore[method-assign]
    return steps


def _moved_from_the_reference(learner: Learner, seed: int = 1) -> None:
    """Perturb the policy so that π_old (and every later policy) differs from the reference."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in learner.model.parameters():
            p.add_(0.05 * p.std() * torch.randn(p.shape, generator=g))


CASES = {
    # token ratios, recomputed anchor, per-token truncated IS, token-mean, full-logits entropy
    "grpo_recompute_tis": replace(
        BASE,
        algorithm="grpo",
        old_logprobs="recompute",
        seq_is_cap=1.05,
        temperature=0.7,
        ppo_epochs=2,
        kl_coef=0.5,
        entropy_coef=0.1,
        loss_agg="token-mean",
        logprob_chunk_tokens=0,
    ),
    # sequence ratios, decoupled weights, Dr. GRPO's constant, chunked head
    "gspo_decoupled_drgrpo": replace(
        BASE,
        algorithm="gspo",
        old_logprobs="decoupled",
        temperature=1.4,
        ppo_epochs=2,
        kl_coef=0.5,
        entropy_coef=0.1,
        loss_agg="seq-mean-token-sum-norm",
        loss_norm_tokens=40,
    ),
    # engine anchor far off: dual clip on both signs of the advantage
    "grpo_engine_dual_clip": replace(
        BASE,
        algorithm="grpo",
        clip_ratio_c=3.0,
        temperature=0.8,
        kl_coef=0.5,
        entropy_coef=0.1,
    ),
}
NOISE = {"grpo_recompute_tis": 0.1, "gspo_decoupled_drgrpo": 0.02, "grpo_engine_dual_clip": 0.8}


def _update(path: str, c: LearnerConfig, noise: float, seed: int = 3):
    learner = Learner(path, c)
    _moved_from_the_reference(learner)
    batch = synthetic_batch(seed)
    batch = with_old_logprobs(batch, learner.compute_logprobs(batch), noise=noise, seed=seed)
    steps = _record_steps(learner)
    metrics = learner.update(batch)
    learner.close()
    return batch, steps, metrics


def _minibatches(c: LearnerConfig, n: int) -> list[list[int]]:
    half = [list(range(n // 2)), list(range(n // 2, n))]  # contiguous halves, in order
    assert c.num_minibatches == 2
    return half * c.ppo_epochs


@pytest.mark.parametrize("case", list(CASES))
def test_every_step_of_an_update_has_the_hand_written_gradient(dense_dir, case):
    c = CASES[case]
    batch, steps, metrics = _update(dense_dir, c, NOISE[case])
    model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32)
    model.config.use_cache = False
    ref_lp, _ = _forward(model, batch, c.temperature)  # the starting weights: the reference
    theta0 = steps[0][0]  # the weights before the update's first step: π_old
    model.load_state_dict(theta0, strict=False)
    trainer_lp, _ = _forward(model, batch, c.temperature)
    engine = batch.old_logprobs_BT
    anchor = engine if c.old_logprobs == "engine" else trainer_lp
    assert float((trainer_lp - ref_lp)[batch.loss_mask_BT.bool()].abs().max()) > 1e-3
    plan = _minibatches(c, batch.num_sequences)
    assert len(steps) == len(plan)
    losses = []
    for k, ((params, grads), rows) in enumerate(zip(steps, plan, strict=True)):

        def loss_fn(rows=rows):
            lp, ent = _forward(model, batch, c.temperature, grad=True)
            return _hand_loss(c, batch, rows, lp, ent, anchor, engine, ref_lp)

        loss, want = _hand_grad(model, params, loss_fn)
        losses.append(loss)
        err = _rel_err(grads, want)
        assert err < TOL, f"step {k}: relative gradient error {err:.2e}"
    # the value too (a clipped term has no gradient; its value still counts): mean over steps
    assert metrics["loss"] == pytest.approx(sum(losses) / len(losses), rel=TOL, abs=1e-6)


def test_dual_clip_batch_has_large_ratios_on_both_signs_of_the_advantage(dense_dir):
    """The dual-clip case above can tell A < 0 from r > c: both kinds of token are in it."""
    c = CASES["grpo_engine_dual_clip"]
    learner = Learner(dense_dir, c)
    _moved_from_the_reference(learner)
    batch = synthetic_batch(3)
    lp = learner.compute_logprobs(batch)
    learner.close()
    batch = with_old_logprobs(batch, lp, noise=NOISE["grpo_engine_dual_clip"], seed=3)
    m = batch.loss_mask_BT.bool()
    big = (lp - batch.old_logprobs_BT).exp() > c.clip_ratio_c
    adv = batch.advantages_BT
    assert int((big & m & (adv < 0)).sum()) > 0 and int((big & m & (adv > 0)).sum()) > 0


def test_first_minibatch_clip_stats_are_the_first_steps_before_any_weight_changed(dense_dir):
    c = CASES["grpo_engine_dual_clip"]
    batch, steps, metrics = _update(dense_dir, c, NOISE["grpo_engine_dual_clip"])
    model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32)
    model.config.use_cache = False
    fracs = []
    for (params, _), rows in zip(steps, _minibatches(c, batch.num_sequences), strict=True):
        model.load_state_dict(params, strict=False)
        lp, _ = _forward(model, batch, c.temperature)
        r = (lp - batch.old_logprobs_BT).exp()
        m, adv = batch.loss_mask_BT.bool(), batch.advantages_BT
        clipped = ((adv > 0) & (r > 1.27)) | ((adv < 0) & (r < 0.8))
        tok = [clipped[i][m[i]] for i in rows]
        fracs.append(
            (
                sum(int(t.sum()) for t in tok) / sum(t.numel() for t in tok),
                sum(bool(t.any()) for t in tok) / len(tok),
            )
        )
    assert metrics["clip_frac_tokens_first_mb"] == pytest.approx(fracs[0][0], abs=1e-6)
    assert metrics["clip_frac_seqs_first_mb"] == pytest.approx(fracs[0][1], abs=1e-6)
    assert fracs[0][0] != pytest.approx(fracs[-1][0], abs=1e-3)  # the last would be another


def test_packing_is_never_used_for_a_moe_model_even_when_requested(moe_dir):
    results = []
    for packing in ("on", "off"):
        cfg = replace(BASE, packing=packing, routing_replay=True, old_logprobs="recompute")
        learner = Learner(moe_dir, cfg)
        batch = synthetic_batch(5)
        batch = with_old_logprobs(batch, learner.compute_logprobs(batch), noise=0.01)
        steps = _record_steps(learner)
        metrics = learner.update(batch)
        learner.close()
        results.append((metrics, steps))
    (m_on, s_on), (m_off, s_off) = results
    assert m_on["expert_volatility"] == m_off["expert_volatility"]
    for (_, g_on), (_, g_off) in zip(s_on, s_off, strict=True):
        assert _rel_err(g_on, g_off) == 0.0


# --------------------------------------------------------------------------------------------
# who may import whom (DESIGN.md: the rollout side and the learner never import each other)
# --------------------------------------------------------------------------------------------
def _imports(path: Path) -> set[str]:
    import ast

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_rollout_and_learner_never_import_each_other_and_passes_only_the_forward():
    pkg = Path(__file__).resolve().parents[1] / "gspo_agents"
    for f in (pkg / "rollout").rglob("*.py"):
        bad = {m for m in _imports(f) if m.startswith("gspo_agents.learner")}
        assert not bad, f"{f.name} imports {bad}"
    for f in (pkg / "learner").rglob("*.py"):
        bad = {m for m in _imports(f) if m.startswith("gspo_agents.rollout")}
        assert not bad, f"{f.name} imports {bad}"
    # the passes reach the model through forward.Forward, never the Learner itself
    for name in ("prepass.py", "probe.py", "forward.py"):
        assert "gspo_agents.learner.learner" not in _imports(pkg / "learner" / name), name
        assert "learner._" not in (pkg / "learner" / name).read_text(), name
