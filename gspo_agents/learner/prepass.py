"""The learner's passes over the whole batch before an update's first optimizer step.

- the old policy's pass (the weights before this update), when an option needs it: its
  log-probs become the recomputed anchor and the behaviour weights (offpolicy.py), its routes
  the routes replayed at every step (routing replay, moe.py);
- the frozen reference's log-probs, when the loss has a KL penalty (`kl_coef > 0`).

Both run without gradient, in the same synced micro-batches as training, and hand the loss a
`PreUpdate` (probe.py). These are functions of a `Learner`'s forward machinery (its micro-batches,
heads and router hooks); they take no optimizer step and compute no loss.

Shape legend: B rows of the batch, T padded positions.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from gspo_agents.learner.batching import rank_rows
from gspo_agents.learner.errors import BatchError
from gspo_agents.learner.lora import reference_mode
from gspo_agents.learner.moe import routes_per_row, with_engine_routes
from gspo_agents.learner.parallel import all_reduce_
from gspo_agents.learner.probe import PreUpdate
from gspo_agents.offpolicy import behaviour_weights
from gspo_agents.trajectory import FlatBatch

if TYPE_CHECKING:
    from gspo_agents.learner.learner import Learner


def pre_update(learner: Learner, batch: FlatBatch, lengths: list[int]) -> PreUpdate:
    """Everything the update's loss needs from before its first step. All ranks call."""
    pre = old_policy_pass(learner, batch, lengths)
    if learner._ref_head is not None:
        pre.ref_logprobs_BT = reference_logprobs(learner, batch, lengths)
    return pre


@torch.no_grad()
def reference_logprobs(learner: Learner, batch: FlatBatch, lengths: list[int]) -> torch.Tensor:
    """The frozen reference's log-probs of every token, [B, T] on CPU (KL penalty)."""
    assert learner._ref_head is not None
    out_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=learner.device)
    mine = rank_rows(list(range(batch.num_sequences)), learner.rank, learner.world_size)
    for rows in learner._synced_microbatches(batch, mine, lengths):
        mb = learner._micro(batch, rows, lengths)
        ids_BT = mb.input_ids_BT.to(learner.device)
        autocast = torch.autocast(
            learner.device.type, dtype=torch.bfloat16, enabled=learner._autocast
        )
        with autocast, reference_mode(learner.model):  # LoRA: the frozen base, adapters off
            stats = learner._ref_head(
                ids_BT, attention_mask=mb.attention_mask_BT.to(learner.device)
            )
        if rows is not None:
            out_BT[rows, : ids_BT.shape[1]] = stats.logprobs_BT
    return all_reduce_(out_BT, learner._info).cpu()


@torch.no_grad()
def old_policy_pass(learner: Learner, batch: FlatBatch, lengths: list[int]) -> PreUpdate:
    """What the old policy (the weights before this update) says about the batch, when an
    option needs it: its log-probs (the anchor and the behaviour weights) and its routing."""
    off, replay = learner._off, learner.cfg.routing_replay
    if not (off.needs_trainer_logprobs or replay):
        return PreUpdate(batch)
    learner.model.eval()
    # With replay every rank needs the routes of the rows it will train: all ranks take all.
    rows = list(range(batch.num_sequences))
    mine = rows if replay else rank_rows(rows, learner.rank, learner.world_size)
    lp_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=learner.device)
    routes: dict[int, torch.Tensor] = {}
    for micro in learner._synced_microbatches(batch, mine, lengths):
        mb = learner._micro(batch, micro, lengths)
        with learner._routers.recording_if(replay) as rec:
            lp, T = learner._logprobs(mb)
        if micro is None:
            continue
        lp_BT[micro, :T] = lp
        if replay and rec:
            cut = routes_per_row(rec[0], len(micro), [lengths[r] for r in micro])
            routes.update(zip(micro, cut, strict=True))
    if not replay:
        all_reduce_(lp_BT, learner._info)
    trainer_lp_BT = lp_BT.cpu()
    if replay and learner.cfg.routing_replay_source == "engine":  # the routes behind pi_old
        layers, k = len(learner._routers.routers), learner._routers.top_k
        try:
            routes = with_engine_routes(routes, batch.engine_routes, layers, k)
        except ValueError as exc:
            raise BatchError(str(exc)) from None
    out = PreUpdate(batch, routes=routes)
    if off.needs_trainer_logprobs:
        mask = batch.loss_mask_BT.bool()
        out.weights_BT, out.metrics = behaviour_weights(
            trainer_lp_BT, batch.old_logprobs_BT, mask, off, learner._objective.ratio_level
        )
        if off.old_logprobs != "engine":
            anchor_BT = torch.where(mask, trainer_lp_BT, torch.zeros_like(trainer_lp_BT))
            out.batch = dataclasses.replace(batch, old_logprobs_BT=anchor_BT)
    return out
