"""Combining per-micro-batch loss metrics into one value per minibatch, across ranks.

Each `policy_loss` call reports means over its own tokens or sequences plus its sizes; a minibatch
metric is the size-weighted mean over every micro-batch of every rank (min/max by min/max).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from gspo_agents.learner.parallel import ProcessInfo, all_reduce_

TOKEN_WEIGHTED = ("clip_frac_tokens", "approx_kl", "entropy")
# reported only when their option is on (KL penalty, dual clip)
OPTIONAL_TOKEN_WEIGHTED = ("kl_ref", "dual_clip_frac_tokens")
SEQ_WEIGHTED = ("clip_frac_seqs",)


class MinibatchStats:
    """Accumulates one minibatch's loss and metrics on this rank; `reduce` combines ranks."""

    def __init__(self, ratio_level: str) -> None:
        # ratio_mean describes sequences (GSPO) or tokens (GRPO): weight it accordingly
        self.weights = {k: "num_tokens" for k in (*TOKEN_WEIGHTED, *OPTIONAL_TOKEN_WEIGHTED)}
        self.seen: set[str] = set()
        self.weights.update({k: "num_seqs" for k in SEQ_WEIGHTED})
        self.weights["ratio_mean"] = "num_seqs" if ratio_level == "sequence" else "num_tokens"
        self.sums = {k: 0.0 for k in (*self.weights, "num_tokens", "num_seqs", "loss")}
        self.ratio_min = math.inf
        self.ratio_max = -math.inf

    def add(self, loss: torch.Tensor, metrics: dict[str, torch.Tensor]) -> None:
        m = {k: float(v) for k, v in metrics.items()}
        self.sums["loss"] += float(loss.detach())
        self.sums["num_tokens"] += m["num_tokens"]
        self.sums["num_seqs"] += m["num_seqs"]
        for key, weight in self.weights.items():
            if key in m:
                self.sums[key] += m[key] * m[weight]
                self.seen.add(key)
        if m["num_seqs"] > 0:
            self.ratio_min = min(self.ratio_min, m["ratio_min"])
            self.ratio_max = max(self.ratio_max, m["ratio_max"])

    def reduce(self, info: ProcessInfo) -> dict[str, float]:
        keys = list(self.sums)
        sums = torch.tensor([self.sums[k] for k in keys], dtype=torch.float64, device=info.device)
        all_reduce_(sums, info)
        total = dict(zip(keys, sums.tolist(), strict=True))
        lo = all_reduce_(
            torch.tensor([self.ratio_min], device=info.device), info, dist.ReduceOp.MIN
        )
        hi = all_reduce_(
            torch.tensor([self.ratio_max], device=info.device), info, dist.ReduceOp.MAX
        )
        out = {"loss": total["loss"]}
        for key, weight in self.weights.items():
            if key in OPTIONAL_TOKEN_WEIGHTED and key not in self.seen:
                continue
            out[key] = total[key] / total[weight] if total[weight] > 0 else 0.0
        out["ratio_min"] = float(lo) if math.isfinite(float(lo)) else 1.0
        out["ratio_max"] = float(hi) if math.isfinite(float(hi)) else 1.0
        out["num_tokens"] = total["num_tokens"]
        out["num_seqs"] = total["num_seqs"]
        return out


def masked_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Mean of x over the positions where mask is 1 (0 when there are none)."""
    mask = mask_BT.to(x_BT.device, x_BT.dtype)
    return (x_BT * mask).sum() / mask.sum().clamp(min=1.0)


def mean_over(dicts: list[dict[str, float]]) -> dict[str, float]:
    """Means over minibatches; min/max and counts keep their meaning."""
    if not dicts:
        return {}
    out = {k: sum(d[k] for d in dicts) / len(dicts) for k in dicts[0]}
    out["ratio_min"] = min(d["ratio_min"] for d in dicts)
    out["ratio_max"] = max(d["ratio_max"] for d in dicts)
    out["num_tokens"] = sum(d["num_tokens"] for d in dicts)
    out["num_seqs"] = sum(d["num_seqs"] for d in dicts)
    return out
