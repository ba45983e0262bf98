"""The learner's passes over the whole batch before an update's first optimizer step.

- the old policy's pass (the weights before this update), when an option needs it: its
  log-probs become the recomputed anchor and the behaviour weights (offpolicy.py), its routes
  the routes replayed at every step (routing replay, moe.py);
- the frozen reference's log-probs, when the loss has a KL penalty (`kl_coef > 0`).

Both run without gradient, in the same synced micro-batches as training, and hand the loss a
`PreUpdate` (probe.py). They reach the model only through `Forward` (forward.py), which the
learner implements; they take no optimizer step and compute no loss.

Shape legend: B rows of the batch, T padded positions.
"""

from __future__ import annotations

import dataclasses

import torch

from gspo_agents.learner.batching import rank_rows
from gspo_agents.learner.errors import BatchError
from gspo_agents.learner.forward import Forward
from gspo_agents.learner.moe import routes_per_row, with_engine_routes
from gspo_agents.learner.parallel import all_reduce_
from gspo_agents.learner.probe import PreUpdate
from gspo_agents.objectives import get_objective
from gspo_agents.offpolicy import behaviour_weights
from gspo_agents.trajectory import FlatBatch


def pre_update(fwd: Forward, batch: FlatBatch, lengths: list[int]) -> PreUpdate:
    """Everything the update's loss needs from before its first step. All ranks call."""
    pre = old_policy_pass(fwd, batch, lengths)
    if fwd.cfg.kl_coef > 0:
        pre.ref_logprobs_BT = reference_logprobs(fwd, batch, lengths)
    return pre


@torch.no_grad()
def reference_logprobs(fwd: Forward, batch: FlatBatch, lengths: list[int]) -> torch.Tensor:
    """The frozen reference's log-probs of every token, [B, T] on CPU (KL penalty)."""
    out_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=fwd.device)
    info = fwd.process
    mine = rank_rows(list(range(batch.num_sequences)), info.rank, info.world_size)
    for rows in fwd.synced_microbatches(batch, mine, lengths):
        mb = fwd.microbatch(batch, rows, lengths)
        lp_BT = fwd.reference_logprobs(mb)
        if rows is not None:
            out_BT[rows, : lp_BT.shape[1]] = lp_BT
    return all_reduce_(out_BT, info).cpu()


@torch.no_grad()
def old_policy_pass(fwd: Forward, batch: FlatBatch, lengths: list[int]) -> PreUpdate:
    """What the old policy (the weights before this update) says about the batch, when an
    option needs it: its log-probs (the anchor and the behaviour weights) and its routing."""
    cfg, info, routers = fwd.cfg, fwd.process, fwd.routers
    off, replay = cfg.off_policy, cfg.routing_replay
    if not (off.needs_trainer_logprobs or replay):
        return PreUpdate(batch)
    fwd.model.eval()
    # With replay every rank needs the routes of the rows it will train: all ranks take all.
    rows = list(range(batch.num_sequences))
    mine = rows if replay else rank_rows(rows, info.rank, info.world_size)
    lp_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=fwd.device)
    routes: dict[int, torch.Tensor] = {}
    for micro in fwd.synced_microbatches(batch, mine, lengths):
        mb = fwd.microbatch(batch, micro, lengths)
        with routers.recording_if(replay) as rec:
            lp = fwd.policy_logprobs(mb)
        if micro is None:
            continue
        lp_BT[micro, : lp.shape[1]] = lp
        if replay and rec:
            cut = routes_per_row(rec[0], len(micro), [lengths[r] for r in micro])
            routes.update(zip(micro, cut, strict=True))
    if not replay:
        all_reduce_(lp_BT, info)
    trainer_lp_BT = lp_BT.cpu()
    if replay and cfg.routing_replay_source == "engine":  # the routes behind pi_old
        layers, k = len(routers.routers), routers.top_k
        try:
            routes = with_engine_routes(routes, batch.engine_routes, layers, k)
        except ValueError as exc:
            raise BatchError(str(exc)) from None
    out = PreUpdate(batch, routes=routes)
    if off.needs_trainer_logprobs:
        mask = batch.loss_mask_BT.bool()
        out.weights_BT, out.metrics = behaviour_weights(
            trainer_lp_BT,
            batch.old_logprobs_BT,
            mask,
            off,
            get_objective(cfg.algorithm).ratio_level,
        )
        if off.old_logprobs != "engine":
            anchor_BT = torch.where(mask, trainer_lp_BT, torch.zeros_like(trainer_lp_BT))
            out.batch = dataclasses.replace(batch, old_logprobs_BT=anchor_BT)
    return out
