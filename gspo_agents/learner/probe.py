"""What the learner measures around an update, and what its pre-update pass hands the loss.

- `Probe`: the first minibatch's forward before any weight changes (engine-vs-trainer gap, signed
  sequence log-ratios, router choices for expert volatility); `record_probe` fills it during
  that forward, `probe_metrics` reduces it over ranks.
- `expert_volatility`: the first minibatch re-routed after its one optimizer step (MoE).
- `PreUpdate`: the old policy's pass over the whole batch (the recomputed anchor, behaviour
  weights, routes for routing replay); prepass.py computes it.

Measurement only: nothing here changes a gradient or the loss.

Shape legend: B rows of a micro-batch, T padded positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gspo_agents.learner.forward import Forward, Rows
from gspo_agents.learner.moe import changed_experts, differing_expert_sets
from gspo_agents.learner.parallel import ProcessInfo, all_reduce_
from gspo_agents.offpolicy import mismatch_metrics, sequence_log_ratio
from gspo_agents.trajectory import FlatBatch


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


def record_probe(
    probe: Probe,
    rows: Rows,
    lp_BT: torch.Tensor,
    mb: FlatBatch,
    routes: list,
    engine_BT: torch.Tensor | None,
    device: torch.device,
) -> None:
    """Add one micro-batch of the first minibatch: its trainer-vs-engine gap and routes."""
    probe.micro.append(rows)
    probe.routes.append(routes[0] if routes else None)
    if rows is None:
        return
    assert engine_BT is not None  # a real micro-batch has the engine's log-probs
    mask = mb.loss_mask_BT.to(device).bool()
    engine_BT = engine_BT.to(device)
    gap = (lp_BT.detach() - engine_BT).abs()[mask]
    if gap.numel():
        probe.gap_sum += float(gap.sum())
        probe.gap_max = max(probe.gap_max, float(gap.max()))
        probe.gap_count += gap.numel()
    log_w_B = sequence_log_ratio(lp_BT.detach(), engine_BT, mask)[mask.any(dim=1)]
    probe.seq_log_ratios.extend(log_w_B.tolist())


def probe_metrics(probe: Probe, info: ProcessInfo, device: torch.device) -> dict[str, float]:
    """The probe over all ranks: the token log-prob gap and the sequence mismatch metrics."""
    sums = all_reduce_(torch.tensor([probe.gap_sum, probe.gap_count], device=device), info)
    gap_max = all_reduce_(torch.tensor([probe.gap_max], device=device), info, _MAX)
    out = {
        "logprob_gap_abs_mean": float(sums[0] / sums[1]) if sums[1] > 0 else 0.0,
        "logprob_gap_abs_max": float(gap_max),
    }
    # the first minibatch's sequences, all ranks (an update without a recompute pass)
    log_w = all_gather_floats(probe.seq_log_ratios, info)
    out.update(mismatch_metrics(log_w, torch.ones_like(log_w, dtype=torch.bool)))
    return out


@torch.no_grad()
def expert_volatility(fwd: Forward, batch: FlatBatch, probe: Probe) -> dict[str, float]:
    """Re-route the first minibatch's tokens under the weights after its ONE optimizer step
    and compare with the routes recorded in its forward before the step."""
    lengths = batch.attention_mask_BT.sum(dim=1).tolist()
    counts = torch.zeros(4, dtype=torch.float64, device=fwd.device)
    for rows, before in zip(probe.micro, probe.routes, strict=True):
        mb = fwd.microbatch(batch, rows, lengths)
        with fwd.routers.recording() as after:
            fwd.policy_logprobs(mb)
        if rows is None or before is None or not after:
            continue
        sets = differing_expert_sets(before, after[0], mb.attention_mask_BT.reshape(-1))
        experts = changed_experts(before, after[0], mb.loss_mask_BT.reshape(-1))
        counts += torch.tensor([*sets, *experts], dtype=torch.float64, device=fwd.device)
    all_reduce_(counts, fwd.process)
    c = counts.tolist()
    return {
        # the paper's: share of activated experts that change, response tokens only
        "expert_volatility": c[2] / c[3] if c[3] > 0 else 0.0,
        # the older measure: share of (token, layer) top-k sets that change, all tokens
        "expert_set_change_frac": c[0] / c[1] if c[1] > 0 else 0.0,
    }


_MAX = torch.distributed.ReduceOp.MAX
