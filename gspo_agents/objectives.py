"""Policy-gradient objectives (GSPO, GSPO-token, GRPO) and group advantages, as pure tensor functions.

Nothing here knows about models, processes or I/O. Every loss is normalised by `num_sequences`,
the number of sequences in the GLOBAL minibatch, which the caller passes in: summing the losses
(and gradients) of k ranks that each hold a slice of the minibatch gives exactly the loss of one
rank holding all of it.

A new variant is a new small function registered in `OBJECTIVES`, not a branch inside another.

Shape legend: B = sequences (trajectories) held by this call, T = padded token positions, aligned as
in `gspo_agents.trajectory.FlatBatch` (`logprobs_BT[b, t]` is the log-prob of token t of row b).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from gspo_agents.advantages import GroupAdvantages, group_advantages

__all__ = [
    "Algorithm",
    "ALGORITHMS",
    "Objective",
    "OBJECTIVES",
    "GroupAdvantages",
    "group_advantages",
    "LossAgg",
    "LOSS_AGGS",
    "policy_loss",
    "kl_penalty",
    "KL_ESTIMATORS",
    "gspo_loss",
    "gspo_token_loss",
    "grpo_loss",
]

Algorithm = Literal["gspo", "gspo_token", "grpo"]
Metrics = dict[str, torch.Tensor]
# How per-token terms become one number: mean over each sequence's tokens then over sequences (the
# paper's), one mean over all tokens of the global minibatch, or per-sequence sums averaged over
# sequences, or those sums divided by a constant token count instead (Dr. GRPO's normaliser:
# no length bias). A sequence-level term (GSPO) counts as that value on each of its tokens.
LossAgg = Literal[
    "seq-mean-token-mean", "token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
LOSS_AGGS: tuple[str, ...] = (
    "seq-mean-token-mean",
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
# Estimators of KL(pi || pi_ref) from samples of pi, per token, with log r = log pi_ref - log pi
# (Schulman, "Approximating KL divergence", 2020): k1 = -log r, k2 = (log r)^2 / 2,
# k3 = r - 1 - log r (unbiased and >= 0; GRPO's choice). k3 is clamped as verl's
# `kl_penalty_forward` clamps it: log r to +-K3_LOG_R_MAX before exp, then k3 to <= K3_MAX, so a
# token the policy made far likelier than the reference (log r = -30: k3 = 29) or far less likely
# (log r = +9: k3 = 8,093 unclamped) adds at most 10 and, past the bound, no gradient.
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
K3_LOG_R_MAX = 20.0
K3_MAX = 10.0


# --------------------------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Inputs:
    """Validated inputs shared by every objective (mask as bool, advantages as [B, T])."""

    logprobs_BT: torch.Tensor
    old_logprobs_BT: torch.Tensor
    advantages_BT: torch.Tensor
    mask_BT: torch.Tensor  # bool
    num_sequences: int
    # detached importance weights on each token's term (1: none); constant within a sequence for
    # sequence-level corrections, 0 on masked-out sequences
    weights_BT: torch.Tensor | None = None
    loss_agg: str = "seq-mean-token-mean"
    num_tokens: int = 0  # model tokens of the GLOBAL minibatch (token-mean's denominator)
    norm_tokens: int = 0  # seq-mean-token-sum-norm: the constant token count per sequence
    clip_ratio_c: float | None = None  # dual-clip bound for negative advantages (token ratios)

    @property
    def tokens_B(self) -> torch.Tensor:
        return self.mask_BT.sum(dim=1)

    @property
    def has_tokens_B(self) -> torch.Tensor:
        return self.tokens_B > 0


def _masked(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    # where, not multiply: a NaN/inf log-prob on a masked (padding) position must not leak into
    # the value or the gradient (0 * nan = nan).
    return torch.where(mask_BT, x_BT, torch.zeros_like(x_BT))


def _seq_mean(x_BT: torch.Tensor, inp: _Inputs) -> torch.Tensor:
    """Per-sequence mean over model tokens; 0 for a sequence without model tokens."""
    return _masked(x_BT, inp.mask_BT).sum(dim=1) / inp.tokens_B.clamp(min=1)


def _weighted(x_BT: torch.Tensor, inp: _Inputs) -> torch.Tensor:
    return x_BT if inp.weights_BT is None else x_BT * inp.weights_BT


def _aggregate_tokens(x_BT: torch.Tensor, inp: _Inputs) -> torch.Tensor:
    """The scalar a per-token term aggregates to under `inp.loss_agg` (sum over this call's rows
    divided by a GLOBAL count, so shares of a minibatch add up)."""
    x_BT = _weighted(x_BT, inp)
    if inp.loss_agg == "seq-mean-token-mean":
        return _seq_mean(x_BT, inp).sum() / inp.num_sequences
    total = _masked(x_BT, inp.mask_BT).sum()
    if inp.loss_agg == "token-mean":
        return total / max(inp.num_tokens, 1)
    return total / _sum_denominator(inp)


def _aggregate_sequences(x_B: torch.Tensor, inp: _Inputs) -> torch.Tensor:
    """The same aggregation for a per-sequence term (its value on each of the sequence's tokens)."""
    valid_B = inp.has_tokens_B
    if inp.weights_BT is not None:
        x_B = x_B * _seq_mean(inp.weights_BT, inp)
    x_B = _masked(x_B, valid_B)
    if inp.loss_agg == "seq-mean-token-mean":
        return x_B.sum() / inp.num_sequences
    x_B = x_B * inp.tokens_B
    if inp.loss_agg == "token-mean":
        return x_B.sum() / max(inp.num_tokens, 1)
    return x_B.sum() / _sum_denominator(inp)


def _sum_denominator(inp: _Inputs) -> int:
    """seq-mean-token-sum: N; seq-mean-token-sum-norm: N x a constant token count."""
    if inp.loss_agg == "seq-mean-token-sum-norm":
        return inp.num_sequences * inp.norm_tokens
    return inp.num_sequences


def _clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """min(r·A, clip(r, 1-ε_low, 1+ε_high)·A) and where the clip is the active (gradient-free) side."""
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    surrogate = torch.minimum(ratio * adv, clipped * adv)
    # The min picks the clipped branch only on the side the advantage's sign makes active.
    is_clipped = ((adv > 0) & (ratio > 1.0 + eps_high)) | ((adv < 0) & (ratio < 1.0 - eps_low))
    return surrogate, is_clipped


def _log_ratio_BT(inp: _Inputs) -> torch.Tensor:
    return _masked(inp.logprobs_BT - inp.old_logprobs_BT, inp.mask_BT)


def _approx_kl(inp: _Inputs) -> torch.Tensor:
    """k3 estimator of KL(behaviour ‖ current), mean over model tokens (detached)."""
    log_r = _log_ratio_BT(inp).detach()
    k3 = torch.expm1(log_r) - log_r
    return _masked(k3, inp.mask_BT).sum() / inp.mask_BT.sum().clamp(min=1)


def _count_metrics(inp: _Inputs) -> Metrics:
    """Local sizes, so that a caller can weight metrics across micro-batches and ranks."""
    return {
        "num_tokens": inp.mask_BT.sum().to(torch.float32),
        "num_seqs": inp.has_tokens_B.sum().to(torch.float32),
    }


def _ratio_stats(ratio: torch.Tensor, valid: torch.Tensor) -> Metrics:
    r = ratio.detach()[valid]
    if r.numel() == 0:
        one = torch.ones((), dtype=torch.float32, device=ratio.device)
        return {"ratio_mean": one, "ratio_min": one, "ratio_max": one}
    return {"ratio_mean": r.mean(), "ratio_min": r.min(), "ratio_max": r.max()}


# --------------------------------------------------------------------------------------------
# the objectives
# --------------------------------------------------------------------------------------------
def _sequence_advantages_B(inp: _Inputs) -> torch.Tensor:
    """The one advantage of each sequence; GSPO is undefined for per-token advantages."""
    adv_BT = inp.advantages_BT
    adv_B = _seq_mean(adv_BT, inp)
    spread_BT = _masked((adv_BT - adv_B[:, None]).abs(), inp.mask_BT)
    if spread_BT.numel() and bool((spread_BT > 1e-6 * (1.0 + adv_B.abs()[:, None])).any()):
        raise ValueError(
            "algorithm='gspo' needs one advantage per sequence, but advantages vary across the "
            "model tokens of a sequence; use algorithm='gspo_token' for per-turn advantages"
        )
    return adv_B


def gspo_loss(inp: _Inputs, eps_low: float, eps_high: float) -> tuple[torch.Tensor, Metrics]:
    """GSPO: one length-normalised sequence ratio s_i, clipped per sequence."""
    log_s_B = _log_ratio_BT(inp).sum(dim=1) / inp.tokens_B.clamp(min=1)
    s_B = torch.exp(log_s_B)
    adv_B = _sequence_advantages_B(inp)
    surrogate_B, clipped_B = _clipped_surrogate(s_B, adv_B, eps_low, eps_high)
    valid_B = inp.has_tokens_B
    loss = -_aggregate_sequences(surrogate_B, inp)
    clipped_B = clipped_B & valid_B
    metrics = {
        "clip_frac_tokens": (clipped_B * inp.tokens_B).sum() / inp.tokens_B.sum().clamp(min=1),
        "clip_frac_seqs": clipped_B.sum() / valid_B.sum().clamp(min=1),
        **_ratio_stats(s_B, valid_B),
    }
    return loss, metrics


def gspo_token_loss(inp: _Inputs, eps_low: float, eps_high: float) -> tuple[torch.Tensor, Metrics]:
    """GSPO-token: s_i,t = sg(s_i)·π(y_t)/sg(π(y_t)); per-token advantages, sequence-level clipping."""
    log_s_B = _log_ratio_BT(inp).sum(dim=1) / inp.tokens_B.clamp(min=1)
    lp_BT = inp.logprobs_BT
    log_s_BT = log_s_B.detach()[:, None] + lp_BT - lp_BT.detach()
    s_BT = torch.exp(_masked(log_s_BT, inp.mask_BT))
    surrogate_BT, clipped_BT = _clipped_surrogate(s_BT, inp.advantages_BT, eps_low, eps_high)
    valid_B = inp.has_tokens_B
    loss = -_aggregate_tokens(surrogate_BT, inp)
    clipped_BT = clipped_BT & inp.mask_BT
    metrics = {
        "clip_frac_tokens": clipped_BT.sum() / inp.mask_BT.sum().clamp(min=1),
        "clip_frac_seqs": clipped_BT.any(dim=1).sum() / valid_B.sum().clamp(min=1),
        **_ratio_stats(torch.exp(log_s_B), valid_B),
    }
    return loss, metrics


def grpo_loss(inp: _Inputs, eps_low: float, eps_high: float) -> tuple[torch.Tensor, Metrics]:
    """GRPO baseline: per-token ratios and clipping; per-sequence token mean, then / N."""
    ratio_BT = torch.exp(_log_ratio_BT(inp))
    adv_BT = inp.advantages_BT
    surrogate_BT, clipped_BT = _clipped_surrogate(ratio_BT, adv_BT, eps_low, eps_high)
    dual: Metrics = {}
    if inp.clip_ratio_c is not None:
        # dual clip: with A < 0 the term is bounded below by c·A however large the ratio
        floor_BT = inp.clip_ratio_c * adv_BT
        dual_BT = (adv_BT < 0) & (surrogate_BT < floor_BT) & inp.mask_BT
        surrogate_BT = torch.where(dual_BT, floor_BT, surrogate_BT)
        dual["dual_clip_frac_tokens"] = dual_BT.sum() / inp.mask_BT.sum().clamp(min=1)
    loss = -_aggregate_tokens(surrogate_BT, inp)
    clipped_BT = clipped_BT & inp.mask_BT
    metrics = {
        **dual,
        "clip_frac_tokens": clipped_BT.sum() / inp.mask_BT.sum().clamp(min=1),
        # a sequence counts as clipped when any of its tokens is
        "clip_frac_seqs": clipped_BT.any(dim=1).sum() / inp.has_tokens_B.sum().clamp(min=1),
        **_ratio_stats(ratio_BT, inp.mask_BT),
    }
    return loss, metrics


def kl_penalty(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled by pi ([B, T], carries the
    gradient of `logprobs_BT`); see `KL_ESTIMATORS` (k3 clamped as verl does)."""
    log_r = ref_logprobs_BT.detach().float() - logprobs_BT.float()
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    if estimator == "k3":
        log_r = log_r.clamp(-K3_LOG_R_MAX, K3_LOG_R_MAX)
        return (torch.expm1(log_r) - log_r).clamp(max=K3_MAX)
    raise ValueError(
        f"kl_estimator={estimator!r} is not valid; choose one of {', '.join(KL_ESTIMATORS)}"
    )


def _regularizers(
    inp: _Inputs,
    ref_logprobs_BT: torch.Tensor | None,
    kl_coef: float,
    kl_estimator: str,
    entropy_BT: torch.Tensor | None,
    entropy_coef: float,
) -> tuple[torch.Tensor, Metrics]:
    """kl_coef · agg(KL to the reference) − entropy_coef · agg(entropy), aggregated like the
    policy term but without importance weights (they correct the policy gradient only)."""
    plain = dataclasses.replace(inp, weights_BT=None)
    loss = inp.logprobs_BT.new_zeros(())
    metrics: Metrics = {}
    n_tok = inp.mask_BT.sum().clamp(min=1)
    if ref_logprobs_BT is not None and kl_coef:
        kl_BT = kl_penalty(inp.logprobs_BT, ref_logprobs_BT, kl_estimator)
        loss = loss + kl_coef * _aggregate_tokens(kl_BT, plain)
        metrics["kl_ref"] = _masked(kl_BT.detach(), inp.mask_BT).sum() / n_tok
    if entropy_BT is not None and entropy_coef:
        loss = loss - entropy_coef * _aggregate_tokens(entropy_BT.float(), plain)
        metrics["entropy"] = _masked(entropy_BT.detach().float(), inp.mask_BT).sum() / n_tok
    return loss, metrics


@dataclass(frozen=True, slots=True)
class Objective:
    fn: Callable[[_Inputs, float, float], tuple[torch.Tensor, Metrics]]
    eps_low: float  # default lower clip range
    eps_high: float  # default upper clip range
    ratio_level: Literal["sequence", "token"]  # what ratio_mean/min/max describe


OBJECTIVES: dict[str, Objective] = {
    "gspo": Objective(gspo_loss, 3e-4, 4e-4, "sequence"),
    "gspo_token": Objective(gspo_token_loss, 3e-4, 4e-4, "sequence"),
    "grpo": Objective(grpo_loss, 0.2, 0.27, "token"),
}
ALGORITHMS: tuple[str, ...] = tuple(OBJECTIVES)


def get_objective(algorithm: str) -> Objective:
    try:
        return OBJECTIVES[algorithm]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(str(algorithm), ALGORITHMS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"unknown algorithm {algorithm!r}{hint}; choose one of {', '.join(ALGORITHMS)}"
        ) from None


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------
def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    algorithm: str = "gspo",
    eps_low: float | None = None,
    eps_high: float | None = None,
    num_sequences: int | None = None,
    weights: torch.Tensor | None = None,
    loss_agg: str = "seq-mean-token-mean",
    num_tokens: int | None = None,
    norm_tokens: int | None = None,
    clip_ratio_c: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, Metrics]:
    """The policy loss of `algorithm` and its (detached) metrics.

    logprobs [B, T] (current policy, carries the gradient), old_logprobs [B, T] (behaviour policy),
    advantages [B] or [B, T], loss_mask [B, T] (1 on model-sampled tokens). `eps_low`/`eps_high`
    default to the algorithm's own (GSPO 3e-4 / 4e-4, GRPO 0.2 / 0.27). `num_sequences` is the size
    of the GLOBAL minibatch (defaults to B): the loss is a sum over this call's sequences divided by
    it. Metrics are means over this call's sequences/tokens; `num_tokens` and `num_seqs` give the
    weights for combining them across calls.

    `weights` [B] or [B, T] (detached): importance weights multiplying each sequence's (token's)
    term, e.g. a truncated behaviour correction (`gspo_agents.offpolicy`); 0 drops a sequence.
    `loss_agg` picks the aggregation (`LOSS_AGGS`); for "token-mean", `num_tokens` is the model-
    token count of the GLOBAL minibatch (defaults to this call's); "seq-mean-token-sum-norm"
    divides the token sums by N x `norm_tokens` (a constant, e.g. the longest possible response).

    `clip_ratio_c` (> 1, token-level ratios only): dual clip, each term >= c·A when A < 0.
    `ref_logprobs` [B, T] with `kl_coef`: adds kl_coef x the `kl_estimator` estimate of
    KL(pi || pi_ref); `entropy` [B, T] (the policy's per-token entropy, with its gradient) with
    `entropy_coef`: subtracts entropy_coef x its aggregate (an entropy bonus).
    """
    objective = get_objective(algorithm)
    inp = _validate(logprobs, old_logprobs, advantages, loss_mask, num_sequences)
    if loss_agg not in LOSS_AGGS:
        raise ValueError(
            f"loss_agg={loss_agg!r} is not valid; choose one of {', '.join(LOSS_AGGS)}"
        )
    w_BT = None
    if weights is not None:
        w_BT = weights.detach().float()
        w_BT = w_BT[:, None].expand_as(inp.logprobs_BT) if w_BT.dim() == 1 else w_BT
        if w_BT.shape != inp.logprobs_BT.shape:
            raise ValueError(
                f"weights must be [B] or [B, T]={tuple(inp.logprobs_BT.shape)}, "
                f"got {tuple(weights.shape)}"
            )
        w_BT = _masked(w_BT.to(inp.logprobs_BT.device), inp.mask_BT)
    n_tok = int(inp.mask_BT.sum()) if num_tokens is None else int(num_tokens)
    _check_options(objective, loss_agg, norm_tokens, clip_ratio_c)
    inp = dataclasses.replace(
        inp,
        weights_BT=w_BT,
        loss_agg=loss_agg,
        num_tokens=n_tok,
        norm_tokens=int(norm_tokens or 0),
        clip_ratio_c=clip_ratio_c,
    )
    lo = objective.eps_low if eps_low is None else float(eps_low)
    hi = objective.eps_high if eps_high is None else float(eps_high)
    if lo < 0 or hi < 0 or lo >= 1:
        raise ValueError(
            f"clip ranges must satisfy 0 <= eps_low < 1 and eps_high >= 0, got {lo}, {hi}"
        )
    loss, metrics = objective.fn(inp, lo, hi)
    reg_loss, reg_metrics = _regularizers(
        inp, ref_logprobs, kl_coef, kl_estimator, entropy, entropy_coef
    )
    loss = loss + reg_loss
    metrics = {k: v.detach().to(torch.float32) for k, v in {**metrics, **reg_metrics}.items()}
    metrics["approx_kl"] = _approx_kl(inp)
    metrics.update(_count_metrics(inp))
    return loss, metrics


def _check_options(
    objective: Objective, loss_agg: str, norm_tokens: int | None, clip_ratio_c: float | None
) -> None:
    if loss_agg == "seq-mean-token-sum-norm" and not (norm_tokens and norm_tokens > 0):
        raise ValueError("loss_agg='seq-mean-token-sum-norm' needs norm_tokens > 0 (a constant)")
    if clip_ratio_c is not None:
        if objective.ratio_level != "token":
            raise ValueError(
                "clip_ratio_c (dual clip) bounds token-level ratios; use it with algorithm=grpo"
            )
        if not clip_ratio_c > 1.0:
            raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")


def _validate(logprobs, old_logprobs, advantages, loss_mask, num_sequences) -> _Inputs:
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    B = logprobs.shape[0]
    for name, t in (("old_logprobs", old_logprobs), ("loss_mask", loss_mask)):
        if t.shape != logprobs.shape:
            raise ValueError(
                f"{name} must match logprobs {tuple(logprobs.shape)}, got {tuple(t.shape)}"
            )
    if advantages.dim() == 1 and advantages.shape[0] == B:
        advantages = advantages[:, None].expand_as(logprobs)
    elif advantages.shape != logprobs.shape:
        raise ValueError(
            f"advantages must be [B]={B} or [B, T]={tuple(logprobs.shape)}, got {tuple(advantages.shape)}"
        )
    n = B if num_sequences is None else int(num_sequences)
    if n <= 0:
        raise ValueError(f"num_sequences (global minibatch size) must be > 0, got {num_sequences}")
    return _Inputs(
        logprobs_BT=logprobs.float(),
        old_logprobs_BT=old_logprobs.detach().float(),
        advantages_BT=advantages.detach().float(),
        mask_BT=loss_mask.bool(),
        num_sequences=n,
    )
