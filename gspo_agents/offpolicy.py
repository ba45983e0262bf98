"""Off-policy corrections between the behaviour policy (the engine) and the trainer, as pure
tensor functions.

The engine's log-probs `engine_lp` are the behaviour likelihood of what was sampled; the trainer's
log-probs `trainer_lp` of the same tokens, computed before the update, are the proximal anchor.
They differ through staleness (tokens from older weight versions) and numerics (a bf16 engine
against an fp32 trainer, other kernels). With `algorithm.old_logprobs`:

- engine (default): the clip anchor is the engine's log-prob; nothing here is applied.
- recompute: the anchor is the trainer's; the behaviour gap is ignored (biased when it is large).
- decoupled: the anchor is the trainer's and each term is weighted by the behaviour importance
  weight pi_prox / pi_behav (AReaL's decoupled objective), per sequence for the sequence-level
  objectives (the length-normalised ratio, as GSPO's s_i) and per token for GRPO.

Independently, `seq_is_cap` applies the behaviour weight truncated at C (truncated IS: with
recompute this is verl's / slime's TIS) and `seq_mask_bound` drops sequences whose signed
sequence-level log-ratio |log w_i| exceeds a bound (masked IS). Both need the trainer's log-probs.

`seq_is_ratio` picks the sequence weight: `geometric` (default), exp of the MEAN token log-ratio
(GSPO's length-normalised ratio), or `product`, exp of the SUM: the classic sequence importance
weight prod_t pi_prox/pi_engine (Precup et al. 2000; verl's sequence-level rollout IS), unbiased
but with variance growing with length. With `product` every level (GRPO too) uses the sequence
weight, and the cap and the mask bound apply to it.

Shape legend: B sequences, T padded positions; masks are 1 on model-sampled tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["OLD_LOGPROBS", "OffPolicyConfig", "behaviour_weights", "sequence_log_ratio"]

OLD_LOGPROBS: tuple[str, ...] = ("engine", "recompute", "decoupled")
SEQ_IS_RATIOS: tuple[str, ...] = ("geometric", "product")
Level = Literal["sequence", "token"]


@dataclass(frozen=True, slots=True)
class OffPolicyConfig:
    old_logprobs: str = "engine"  # engine | recompute | decoupled
    seq_is_cap: float | None = None  # truncated IS: weights above C become C
    seq_mask_bound: float | None = None  # masked IS: |sequence log-ratio| > bound -> weight 0
    seq_is_ratio: str = "geometric"  # geometric (mean log-ratio) | product (sum)

    def __post_init__(self) -> None:
        if self.old_logprobs not in OLD_LOGPROBS:
            raise ValueError(
                f"old_logprobs={self.old_logprobs!r} is not valid; choose one of "
                f"{', '.join(OLD_LOGPROBS)}"
            )
        if self.seq_is_ratio not in SEQ_IS_RATIOS:
            raise ValueError(
                f"seq_is_ratio={self.seq_is_ratio!r} is not valid; choose one of "
                f"{', '.join(SEQ_IS_RATIOS)}"
            )
        if self.seq_is_ratio == "product" and not self.weights_applied:
            raise ValueError(
                "seq_is_ratio=product changes the behaviour weight, which only decoupled, "
                "seq_is_cap or seq_mask_bound apply: set one of them"
            )
        if self.seq_is_cap is not None and not self.seq_is_cap >= 1.0:
            raise ValueError(f"seq_is_cap must be >= 1 (a cap on weights), got {self.seq_is_cap}")
        if self.seq_mask_bound is not None and not self.seq_mask_bound > 0:
            raise ValueError(f"seq_mask_bound must be > 0, got {self.seq_mask_bound}")
        if self.old_logprobs == "engine" and self.seq_is_cap is not None:
            raise ValueError(
                "seq_is_cap weights by pi_trainer / pi_engine, which needs the trainer's anchor: "
                "set algorithm.old_logprobs=recompute or decoupled"
            )

    @property
    def needs_trainer_logprobs(self) -> bool:
        return (
            self.old_logprobs != "engine"
            or self.seq_is_cap is not None
            or self.seq_mask_bound is not None
        )

    @property
    def weights_applied(self) -> bool:
        return (
            self.old_logprobs == "decoupled"
            or self.seq_is_cap is not None
            or self.seq_mask_bound is not None
        )


def sequence_log_ratio(
    trainer_lp_BT: torch.Tensor, engine_lp_BT: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """Signed log(pi_trainer / pi_engine) per sequence, averaged over its model tokens [B]
    (0 for a sequence without model tokens): the log of GSPO's length-normalised ratio."""
    mask = mask_BT.bool()
    diff = torch.where(mask, trainer_lp_BT.float() - engine_lp_BT.float(), 0.0)
    return diff.sum(dim=1) / mask.sum(dim=1).clamp(min=1)


def behaviour_weights(
    trainer_lp_BT: torch.Tensor,
    engine_lp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    cfg: OffPolicyConfig,
    level: Level = "sequence",
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """The detached weights [B, T] for `policy_loss(weights=...)` (None when `cfg` applies none)
    and the batch's mismatch metrics (which are reported in every mode).

    Weight of a sequence: exp(sequence log-ratio) in decoupled mode or with `seq_is_cap`, else 1;
    then capped at `seq_is_cap`, then 0 where |sequence log-ratio| > `seq_mask_bound`. At token level (GRPO,
    decoupled) the uncapped weight of each token is exp(its own log-ratio).
    """
    mask = mask_BT.bool()
    has_B = mask.any(dim=1)
    log_w_B = sequence_log_ratio(trainer_lp_BT, engine_lp_BT, mask)
    metrics = mismatch_metrics(log_w_B, has_B)
    if not cfg.weights_applied:
        return None, metrics
    if cfg.seq_is_ratio == "product":
        log_w_B = log_w_B * mask.sum(dim=1)  # the sum of the token log-ratios
    ones_BT = torch.ones_like(trainer_lp_BT, dtype=torch.float32)
    if cfg.old_logprobs != "decoupled" and cfg.seq_is_cap is None:
        w_BT = ones_BT  # masking only
    elif level == "token" and cfg.seq_is_ratio == "geometric":
        w_BT = torch.exp(torch.where(mask, trainer_lp_BT.float() - engine_lp_BT.float(), 0.0))
    else:
        w_BT = torch.exp(log_w_B)[:, None] * ones_BT
    if cfg.seq_is_cap is not None:
        truncated = (w_BT > cfg.seq_is_cap) & mask
        metrics["is_truncated_frac"] = float(truncated.sum()) / max(float(mask.sum()), 1.0)
        w_BT = w_BT.clamp(max=cfg.seq_is_cap)
    if cfg.seq_mask_bound is not None:
        out_B = (log_w_B.abs() > cfg.seq_mask_bound) & has_B
        metrics["is_masked_seq_frac"] = float(out_B.sum()) / max(float(has_B.sum()), 1.0)
        w_BT = torch.where(out_B[:, None], torch.zeros_like(w_BT), w_BT)
    return torch.where(mask, w_BT, 0.0).detach(), metrics


def mismatch_metrics(log_w_B: torch.Tensor, has_B: torch.Tensor) -> dict[str, float]:
    """Signed sequence log-ratio trainer vs engine (mean, std, extreme) and the effective sample
    size of the sequence weights w_i = exp(log-ratio), as a share of the sequences (1: on-policy)."""
    x = log_w_B[has_B].double()
    if x.numel() == 0:
        return {
            "engine_logratio_seq_mean": 0.0,
            "engine_logratio_seq_std": 0.0,
            "engine_logratio_seq_absmax": 0.0,
            "is_ess": 1.0,
        }
    w = torch.exp(x - x.max())  # ESS is scale-free: shift for range
    ess = float(w.sum() ** 2 / (w.pow(2).sum() * x.numel()))
    return {
        "engine_logratio_seq_mean": float(x.mean()),
        "engine_logratio_seq_std": float(x.std(unbiased=False)),
        "engine_logratio_seq_absmax": float(x.abs().max()),
        "is_ess": ess,
    }
