"""What the learner measures around an update, and what its pre-update pass hands the loss.

- `Probe`: the first minibatch's forward before any weight changes (engine-vs-trainer gap, signed
  sequence log-ratios, router choices for expert volatility).
- `PreUpdate`: the old policy's pass over the whole batch (the recomputed anchor, behaviour
  weights, routes for routing replay).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gspo_agents.learner.parallel import ProcessInfo
from gspo_agents.trajectory import FlatBatch

Rows = list[int] | None  # None: a dummy micro-batch that keeps FSDP collectives in step


@dataclass(slots=True)
class Probe:
    """What the first minibatch measures before any weight changes (per rank, then reduced)."""

    gap_sum: float = 0.0
    gap_max: float = 0.0
    gap_count: float = 0.0
    seq_log_ratios: list[float] = field(default_factory=list)  # signed, trainer vs engine
    micro: list[Rows] = field(default_factory=list)
    routes: list[torch.Tensor | None] = field(default_factory=list)  # [layers, tokens, k]


@dataclass(slots=True)
class PreUpdate:
    """The batch as trained (anchor possibly replaced) and what the old policy's pass produced."""

    batch: FlatBatch
    weights_BT: torch.Tensor | None = None  # behaviour weights on every token (None: none)
    metrics: dict[str, float] = field(default_factory=dict)
    routes: dict[int, torch.Tensor] = field(default_factory=dict)  # row -> [layers, length, k]
    ref_logprobs_BT: torch.Tensor | None = None  # the frozen reference's (KL penalty)


def version_lag(batch: FlatBatch) -> dict[str, float]:
    """How many weight versions each model token lags the newest in the batch (staleness)."""
    v = batch.versions_BT[batch.loss_mask_BT.bool()]
    if v.numel() == 0:
        return {"version_lag_mean": 0.0, "version_lag_max": 0.0}
    lag = (v.max() - v).float()
    return {"version_lag_mean": float(lag.mean()), "version_lag_max": float(lag.max())}


def all_gather_floats(values: list[float], info: ProcessInfo) -> torch.Tensor:
    """Every rank's list of floats, concatenated (CPU, float64)."""
    local = torch.tensor(values, dtype=torch.float64)
    if not info.distributed:
        return local
    gathered: list[list[float]] = [[] for _ in range(info.world_size)]
    torch.distributed.all_gather_object(gathered, values)
    return torch.tensor([x for part in gathered for x in part], dtype=torch.float64)
