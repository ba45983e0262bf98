"""The learner: GSPO updates of an HF causal LM, single-process or FSDP2 under torchrun.

One `update(batch)` takes the same global rollout batch on every rank and makes
`num_minibatches` optimizer steps. Each rank trains on its strided share of each minibatch, in
micro-batches under a token budget with gradient accumulation; every loss is normalised by
the GLOBAL minibatch size, so 1 rank and k ranks compute the same step (tests prove it).
Token log-probs come from the last hidden states through the output layer a chunk of positions at
a time (head.py), so no [T, V] logits tensor outlives one chunk; a micro-batch's rows are packed
into one padding-free row where the attention implementation allows (packing.py). With
`share_prompt_prefix` (single process, dense models) each group's common prompt is forwarded
once per micro-batch instead of once per row (prefix.py). Each path's step equals the plain
full-logits, padded one up to rounding (tests).

It does not know about engines, HTTP or environments: weights leave as an HF directory
(`export_hf`) and trajectories arrive as a `FlatBatch`.

Shape legend: B rows of the batch, T padded positions, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import torch
from torch import nn

from gspo_agents.learner import checkpoint
from gspo_agents.learner.batching import (
    packed_microbatches,
    rank_rows,
    split_minibatches,
    token_budget_microbatches,
)
from gspo_agents.learner.config import LearnerConfig
from gspo_agents.learner.errors import BatchError
from gspo_agents.learner.head import TokenHead
from gspo_agents.learner.moe import (
    RouterRecorder,
    changed_experts,
    differing_expert_sets,
    routes_for_microbatch,
    routes_per_row,
    with_engine_routes,
)
from gspo_agents.learner.packing import pack, packing_unsupported
from gspo_agents.learner.parallel import (
    ProcessInfo,
    all_reduce_,
    close_process,
    init_process,
    set_gradient_sync,
    shard_model,
    use_bf16,
)
from gspo_agents.learner.prefix import plan_microbatches, shared_prefix_stats
from gspo_agents.learner.probe import PreUpdate, Probe, Rows, all_gather_floats, version_lag
from gspo_agents.learner.regularizers import load_reference
from gspo_agents.learner.stats import MinibatchStats, masked_mean, mean_over
from gspo_agents.logprobs import TokenStats
from gspo_agents.objectives import get_objective, policy_loss
from gspo_agents.offpolicy import behaviour_weights, mismatch_metrics, sequence_log_ratio
from gspo_agents.trajectory import FlatBatch

log = logging.getLogger(__name__)

ENGINE_ANCHOR_REPLAY_WARNING = (
    "routing_replay with algorithm.old_logprobs=engine: the replayed experts are the trainer's "
    "own choices at the start of the update, not the engine's routes that produced pi_old, so the "
    "ratio's denominator (engine log-probs) and numerator still use different sub-networks. Use "
    "algorithm.routing_replay_source=engine (an engine that returns its routed experts), or "
    "old_logprobs=recompute or decoupled, for a ratio over the same experts."
)


class Learner:
    def __init__(self, model_path: str, cfg: LearnerConfig) -> None:
        self.cfg = cfg
        self.model_path = str(model_path)
        self._info: ProcessInfo = init_process()
        self.rank = self._info.rank
        self.world_size = self._info.world_size
        self.is_main = self.rank == 0
        self.device = self._info.device
        torch.manual_seed(cfg.seed)
        self._bf16 = use_bf16(cfg.mixed_precision, self.device)
        self.model, self._export_dtype = _load_model(self.model_path, self.device)
        self._routers = RouterRecorder(self.model)  # hooks before sharding: plain module paths
        self._ref = (
            load_reference(self.model_path, self.device, self._info.distributed, self._bf16)
            if cfg.kl_coef > 0
            else None
        )
        if cfg.activation_checkpointing:
            _enable_activation_checkpointing(self.model)
        if self._info.distributed:
            shard_model(self.model, self._bf16)
        # single-process CUDA gets bf16 through autocast; under FSDP the MixedPrecisionPolicy does it
        self._autocast = self._bf16 and not self._info.distributed
        self.optimizer = _build_optimizer(self.model, cfg, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self._objective = get_objective(cfg.algorithm)
        self._share_prefix = cfg.share_prompt_prefix and self._prefix_sharing_supported()
        self._ref_head = (  # the reference's log-probs by the same chunked path
            TokenHead(self._ref, cfg.temperature, cfg.logprob_chunk_tokens)
            if self._ref is not None
            else None
        )
        self._head = TokenHead(
            self.model, cfg.temperature, cfg.logprob_chunk_tokens, entropy_grad=cfg.entropy_coef > 0
        )
        self._pack = cfg.packing != "off" and not self._share_prefix and self._packing_supported()
        self._off = cfg.off_policy
        if cfg.routing_replay and not self._routers.enabled:
            raise ValueError(
                "routing_replay needs a mixture-of-experts model with top-k routers; "
                f"{self.model_path} has none (set algorithm.routing_replay=false)"
            )
        replays_trainer = cfg.routing_replay and cfg.routing_replay_source == "trainer"
        if replays_trainer and cfg.old_logprobs == "engine" and self.is_main:
            log.warning(ENGINE_ANCHOR_REPLAY_WARNING)
        self.step = 0  # optimizer steps taken
        self.skipped_steps = 0  # optimizer steps skipped for a non-finite loss or gradient

    # ----------------------------------------------------------------------------------------
    # public API
    # ----------------------------------------------------------------------------------------
    @property
    def pad_token_id(self) -> int:
        config = self.model.config
        pad = getattr(config, "pad_token_id", None)
        if pad is None:
            eos = getattr(config, "eos_token_id", None)
            pad = eos[0] if isinstance(eos, list) else eos
        return int(pad or 0)

    def update(self, batch: FlatBatch) -> dict[str, float]:
        """Train on one rollout batch: one optimizer step per minibatch. All ranks call."""
        self._check_batch(batch)
        start = time.perf_counter()
        lengths = batch.attention_mask_BT.sum(dim=1).tolist()
        engine_lp_BT = batch.old_logprobs_BT
        pre = self._pre_update(batch, lengths)
        batch = pre.batch
        self.model.train()
        per_minibatch, probe, skipped, volatility = [], Probe(), 0, {}
        minibatches = split_minibatches(batch.num_sequences, self.cfg.num_minibatches)
        # ppo_epochs passes, each over every minibatch, all against the same pi_old
        for i, rows in enumerate(minibatches * self.cfg.ppo_epochs):
            stats, grad_norm, stepped = self._train_minibatch(
                batch, rows, lengths, probe if i == 0 else None, pre, engine_lp_BT
            )
            per_minibatch.append({**stats, "grad_norm": grad_norm})
            skipped += 0 if stepped else 1
            if i == 0 and self._routers.enabled:
                # the paper's volatility is a one-gradient-update quantity: measure it now
                volatility = self._expert_volatility(batch, probe)
        metrics = mean_over(per_minibatch)
        # before any weight changed: the clipping that staleness and numerics alone cause
        metrics["clip_frac_tokens_first_mb"] = per_minibatch[0]["clip_frac_tokens"]
        metrics["clip_frac_seqs_first_mb"] = per_minibatch[0]["clip_frac_seqs"]
        metrics.update(self._probe_metrics(probe))
        metrics.update(volatility)
        metrics.update(pre.metrics)  # the whole batch's mismatch, when it was recomputed
        metrics.update(version_lag(batch))
        elapsed = time.perf_counter() - start
        metrics.update(
            grad_norm_max=max(m["grad_norm"] for m in per_minibatch),
            lr=self.scheduler.get_last_lr()[0],
            skipped_steps=float(skipped),
            optimizer_steps=float(self.step),
            num_minibatches=float(len(per_minibatch)),
            update_time_s=elapsed,
            update_tokens_per_s=float(sum(lengths)) / max(elapsed, 1e-9),
        )
        return metrics

    def _pre_update(self, batch: FlatBatch, lengths: list[int]) -> PreUpdate:
        pre = self._old_policy_pass(batch, lengths)
        if self._ref is not None:
            pre.ref_logprobs_BT = self._reference_logprobs(batch, lengths)
        return pre

    @torch.no_grad()
    def _reference_logprobs(self, batch: FlatBatch, lengths: list[int]) -> torch.Tensor:
        """The frozen reference's log-probs of every token, [B, T] on CPU (KL penalty)."""
        assert self._ref_head is not None
        out_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=self.device)
        mine = rank_rows(list(range(batch.num_sequences)), self.rank, self.world_size)
        for rows in self._synced_microbatches(batch, mine, lengths):
            mb = self._micro(batch, rows, lengths)
            ids_BT = mb.input_ids_BT.to(self.device)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self._autocast):
                stats = self._ref_head(ids_BT, attention_mask=mb.attention_mask_BT.to(self.device))
            if rows is not None:
                out_BT[rows, : ids_BT.shape[1]] = stats.logprobs_BT
        return all_reduce_(out_BT, self._info).cpu()

    @torch.no_grad()
    def _old_policy_pass(self, batch: FlatBatch, lengths: list[int]) -> PreUpdate:
        """What the old policy (the weights before this update) says about the batch, when an
        option needs it: its log-probs (the anchor and the behaviour weights) and its routing."""
        off, replay = self._off, self.cfg.routing_replay
        if not (off.needs_trainer_logprobs or replay):
            return PreUpdate(batch)
        self.model.eval()
        # With replay every rank needs the routes of the rows it will train: all ranks take all.
        rows = list(range(batch.num_sequences))
        mine = rows if replay else rank_rows(rows, self.rank, self.world_size)
        lp_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=self.device)
        routes: dict[int, torch.Tensor] = {}
        for micro in self._synced_microbatches(batch, mine, lengths):
            mb = self._micro(batch, micro, lengths)
            with self._routers.recording() if replay else _null() as rec:
                lp, T = self._logprobs(mb)
            if micro is None:
                continue
            lp_BT[micro, :T] = lp
            if replay and rec:
                cut = routes_per_row(rec[0], len(micro), [lengths[r] for r in micro])
                routes.update(zip(micro, cut, strict=True))
        if not replay:
            all_reduce_(lp_BT, self._info)
        trainer_lp_BT = lp_BT.cpu()
        if replay and self.cfg.routing_replay_source == "engine":  # the routes behind pi_old
            layers, k = len(self._routers.routers), self._routers.top_k
            try:
                routes = with_engine_routes(routes, batch.engine_routes, layers, k)
            except ValueError as exc:
                raise BatchError(str(exc)) from None
        out = PreUpdate(batch, routes=routes)
        if off.needs_trainer_logprobs:
            mask = batch.loss_mask_BT.bool()
            out.weights_BT, out.metrics = behaviour_weights(
                trainer_lp_BT, batch.old_logprobs_BT, mask, off, self._objective.ratio_level
            )
            if off.old_logprobs != "engine":
                anchor_BT = torch.where(mask, trainer_lp_BT, torch.zeros_like(trainer_lp_BT))
                out.batch = dataclasses.replace(batch, old_logprobs_BT=anchor_BT)
        return out

    @torch.no_grad()
    def compute_logprobs(self, batch: FlatBatch) -> torch.Tensor:
        """The current policy's log-probs of every token, [B, T] on CPU. All ranks call."""
        self._check_batch(batch)
        self.model.eval()
        lengths = batch.attention_mask_BT.sum(dim=1).tolist()
        out_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=self.device)
        mine = rank_rows(list(range(batch.num_sequences)), self.rank, self.world_size)
        for rows in self._synced_microbatches(batch, mine, lengths):
            lp_BT, T = self._logprobs(self._micro(batch, rows, lengths))
            if rows is not None:
                out_BT[rows, :T] = lp_BT
        return all_reduce_(out_BT, self._info).cpu()

    def export_hf(self, out_dir: str) -> str:
        """Write the full model as an HF directory (rank 0); all ranks call. Returns out_dir."""
        return checkpoint.export_hf(
            out_dir, self._info, self.model, self.model_path, self._export_dtype
        )

    def save_checkpoint(self, ckpt_dir: str, extra_state: dict) -> None:
        """Model, optimizer, scheduler, step, RNG and the caller's extra_state; atomic."""
        trainer_state = {
            "step": self.step,
            "skipped_steps": self.skipped_steps,
            "scheduler": self.scheduler.state_dict(),
            "extra_state": extra_state,
        }
        checkpoint.save(ckpt_dir, self._info, self.model, self.optimizer, trainer_state)

    def load_checkpoint(self, ckpt_dir: str) -> dict:
        """Restore everything `save_checkpoint` wrote; returns the caller's extra_state."""
        state = checkpoint.load(ckpt_dir, self._info, self.model, self.optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.skipped_steps = int(state["skipped_steps"])
        return state["extra_state"]

    def close(self) -> None:
        self._routers.close()
        close_process(self._info)

    # ----------------------------------------------------------------------------------------
    # one minibatch
    # ----------------------------------------------------------------------------------------
    def _train_minibatch(
        self,
        batch: FlatBatch,
        rows: list[int],
        lengths: list[int],
        probe: Probe | None,
        pre: PreUpdate,
        engine_lp_BT: torch.Tensor,
    ) -> tuple[dict[str, float], float, bool]:
        stats = MinibatchStats(self._objective.ratio_level)
        mine = rank_rows(rows, self.rank, self.world_size)
        micro = self._synced_microbatches(batch, mine, lengths)
        num_tokens = int(batch.loss_mask_BT[rows].sum())
        for j, micro_rows in enumerate(micro):
            set_gradient_sync(self.model, j == len(micro) - 1)
            mb = self._micro(batch, micro_rows, lengths)
            T = mb.input_ids_BT.shape[1]
            weights = None
            if pre.weights_BT is not None:
                weights = (
                    pre.weights_BT[micro_rows, :T]
                    if micro_rows is not None
                    else torch.zeros_like(mb.loss_mask_BT)
                )
            if pre.routes and micro_rows is not None:
                per_row = [pre.routes[r] for r in micro_rows]
                self._routers.replay(routes_for_microbatch(per_row, T, self._routers.top_k))
            elif self.cfg.routing_replay:  # a dummy micro-batch: replay its own (row 0) routes
                self._routers.replay(routes_for_microbatch([pre.routes[0]], T, self._routers.top_k))
            record = probe is not None and micro_rows is not None and self._routers.enabled
            with self._routers.recording() if record else _null() as routes:
                tokens = self._token_stats(mb)
            lp_BT = tokens.logprobs_BT
            entropy_BT = tokens.entropy_BT if self.cfg.entropy_coef else None
            ref_BT = None
            if pre.ref_logprobs_BT is not None:
                ref_BT = pre.ref_logprobs_BT[micro_rows, :T] if micro_rows is not None else lp_BT
            loss, metrics = self._loss(
                lp_BT, mb, len(rows), weights, num_tokens, ref_BT, entropy_BT
            )
            metrics["entropy"] = masked_mean(tokens.entropy_BT.detach(), mb.loss_mask_BT)
            # FSDP averages gradients over ranks; the loss is already a share of the global
            # minibatch, so scale back up to make the reduction a sum.
            (loss * self.world_size).backward()
            self._routers.replay(None)
            if micro_rows is not None:
                stats.add(loss, metrics)
            if probe is not None:
                engine = engine_lp_BT[micro_rows, :T] if micro_rows is not None else None
                self._record_probe(probe, micro_rows, lp_BT, mb, routes, engine)
        grad_norm, stepped = self._optimizer_step(stats.sums["loss"])
        return stats.reduce(self._info), grad_norm, stepped

    def _optimizer_step(self, local_loss: float) -> tuple[float, bool]:
        """Clip and step, unless the loss or gradient is non-finite anywhere (then skip)."""
        params = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        bad = torch.tensor([0.0 if math.isfinite(local_loss) else 1.0], device=self.device)
        finite = float(all_reduce_(bad, self._info)) == 0.0 and math.isfinite(norm)
        if finite:
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1
        else:
            self.skipped_steps += 1
            if self.is_main:
                log.warning(
                    "skipped optimizer step %d: non-finite loss (%s on this rank) or gradient "
                    "norm (%s); weights and optimizer state unchanged (%d skipped so far)",
                    self.step + 1,
                    local_loss,
                    norm,
                    self.skipped_steps,
                )
        self.optimizer.zero_grad(set_to_none=True)
        return norm, finite

    def _loss(self, lp_BT, mb: FlatBatch, num_sequences: int, weights, num_tokens: int, ref, ent):
        d, c = self.device, self.cfg
        return policy_loss(
            lp_BT,
            mb.old_logprobs_BT.to(d),
            mb.advantages_BT.to(d),
            mb.loss_mask_BT.to(d),
            algorithm=self.cfg.algorithm,
            eps_low=self.cfg.eps_low,
            eps_high=self.cfg.eps_high,
            num_sequences=num_sequences,
            weights=None if weights is None else weights.to(d),
            loss_agg=self.cfg.loss_agg,
            num_tokens=num_tokens,
            norm_tokens=c.loss_norm_tokens,
            clip_ratio_c=c.clip_ratio_c,
            ref_logprobs=None if ref is None else ref.to(d),
            kl_coef=c.kl_coef,
            kl_estimator=c.kl_estimator,
            entropy=ent,
            entropy_coef=c.entropy_coef,
        )

    def _logprobs(self, mb: FlatBatch) -> tuple[torch.Tensor, int]:
        return self._token_stats(mb).logprobs_BT, mb.input_ids_BT.shape[1]

    def _token_stats(self, mb: FlatBatch) -> TokenStats:
        """Log-probs and entropies [B, T] of a micro-batch's tokens (0 at position 0 and on
        padding), with gradient; packed into one row, prefix-shared or padded as configured."""
        ids_BT = mb.input_ids_BT.to(self.device)
        attn_BT = mb.attention_mask_BT.to(self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self._autocast):
            if self._share_prefix:
                return shared_prefix_stats(self._head, ids_BT, attn_BT)
            if self._pack:
                packed = pack(ids_BT, attn_BT.sum(dim=1).tolist())
                stats = self._head(packed.input_ids_1N, position_ids=packed.position_ids_1N)
                return TokenStats(*(packed.unpack(x) for x in stats))
            return self._head(ids_BT, attention_mask=attn_BT)

    # ----------------------------------------------------------------------------------------
    # micro-batches
    # ----------------------------------------------------------------------------------------
    def _synced_microbatches(
        self, batch: FlatBatch, rows: list[int], lengths: list[int]
    ) -> list[Rows]:
        """This rank's micro-batches, padded with dummies to the most any rank has.

        Under FSDP every forward/backward is collective, so all ranks run the same count.
        """
        budget = self.cfg.micro_batch_tokens
        if self._share_prefix:  # keep each prompt group together: its prefix counts once
            seqs = [batch.input_ids_BT[r, : lengths[r]].tolist() for r in rows]
            micro: list[Rows] = list(plan_microbatches(rows, seqs, budget))
        elif self._pack:  # a row costs its own length
            micro = list(packed_microbatches(rows, [lengths[r] for r in rows], budget))
        else:
            micro = list(token_budget_microbatches(rows, [lengths[r] for r in rows], budget))
        count = torch.tensor([len(micro)], device=self.device)
        most = int(all_reduce_(count, self._info, torch.distributed.ReduceOp.MAX))
        return micro + [None] * (most - len(micro))

    @staticmethod
    def _micro(batch: FlatBatch, rows: Rows, lengths: list[int]) -> FlatBatch:
        if rows is not None:
            return batch.select(rows)
        # a one-row, two-token micro-batch with nothing to learn: gradient exactly zero
        dummy = batch.select([0])
        n = min(2, dummy.input_ids_BT.shape[1])
        return FlatBatch(
            dummy.input_ids_BT[:, :n],
            dummy.attention_mask_BT[:, :n],
            torch.zeros_like(dummy.loss_mask_BT[:, :n]),
            dummy.old_logprobs_BT[:, :n],
            dummy.advantages_BT[:, :n],
            dummy.versions_BT[:, :n],
        )

    # ----------------------------------------------------------------------------------------
    # probes: engine-vs-learner gap and expert volatility
    # ----------------------------------------------------------------------------------------
    def _record_probe(self, probe: Probe, rows: Rows, lp_BT, mb: FlatBatch, routes, engine) -> None:
        probe.micro.append(rows)
        probe.routes.append(routes[0] if routes else None)
        if rows is None:
            return
        mask = mb.loss_mask_BT.to(self.device).bool()
        engine = engine.to(self.device)
        gap = (lp_BT.detach() - engine).abs()[mask]
        if gap.numel():
            probe.gap_sum += float(gap.sum())
            probe.gap_max = max(probe.gap_max, float(gap.max()))
            probe.gap_count += gap.numel()
        log_w_B = sequence_log_ratio(lp_BT.detach(), engine, mask)[mask.any(dim=1)]
        probe.seq_log_ratios.extend(log_w_B.tolist())

    def _probe_metrics(self, probe: Probe) -> dict[str, float]:
        d = self.device
        sums = all_reduce_(torch.tensor([probe.gap_sum, probe.gap_count], device=d), self._info)
        gap_max = all_reduce_(torch.tensor([probe.gap_max], device=d), self._info, _MAX)
        out = {
            "logprob_gap_abs_mean": float(sums[0] / sums[1]) if sums[1] > 0 else 0.0,
            "logprob_gap_abs_max": float(gap_max),
        }
        # the first minibatch's sequences, all ranks (an update without a recompute pass)
        log_w = all_gather_floats(probe.seq_log_ratios, self._info)
        out.update(mismatch_metrics(log_w, torch.ones_like(log_w, dtype=torch.bool)))
        return out

    @torch.no_grad()
    def _expert_volatility(self, batch: FlatBatch, probe: Probe) -> dict[str, float]:
        """Re-route the first minibatch's tokens under the weights after its ONE optimizer step
        and compare with the routes recorded in its forward before the step."""
        lengths = batch.attention_mask_BT.sum(dim=1).tolist()
        counts = torch.zeros(4, dtype=torch.float64, device=self.device)
        for rows, before in zip(probe.micro, probe.routes, strict=True):
            mb = self._micro(batch, rows, lengths)
            with self._routers.recording() as after:
                self._logprobs(mb)
            if rows is None or before is None or not after:
                continue
            sets = differing_expert_sets(before, after[0], mb.attention_mask_BT.reshape(-1))
            experts = changed_experts(before, after[0], mb.loss_mask_BT.reshape(-1))
            counts += torch.tensor([*sets, *experts], dtype=torch.float64, device=self.device)
        all_reduce_(counts, self._info)
        c = counts.tolist()
        return {
            # the paper's: share of activated experts that change, response tokens only
            "expert_volatility": c[2] / c[3] if c[3] > 0 else 0.0,
            # the older measure: share of (token, layer) top-k sets that change, all tokens
            "expert_set_change_frac": c[0] / c[1] if c[1] > 0 else 0.0,
        }

    # ----------------------------------------------------------------------------------------
    def _prefix_sharing_supported(self) -> bool:
        """share_prompt_prefix needs one process, dense routing and a live KV cache."""
        reasons = {
            "distributed (FSDP) training": self._info.distributed,
            "a mixture-of-experts model (the router probe needs one forward per micro-batch)": (
                self._routers.enabled
            ),
            "activation checkpointing (transformers disables the KV cache)": (
                self.cfg.activation_checkpointing
            ),
            "an entropy bonus (it needs every position's full logits)": self.cfg.entropy_coef > 0,
        }
        off = [why for why, present in reasons.items() if present]
        if off and self.is_main:
            log.warning("share_prompt_prefix is off: not supported with %s", "; ".join(off))
        return not off

    def _packing_supported(self) -> bool:
        why = packing_unsupported(self.model, self.cfg.packing, moe=self._routers.enabled)
        if why and self.is_main:  # asked for explicitly: a warning; by default: for the record
            level = logging.WARNING if self.cfg.packing == "on" else logging.INFO
            log.log(level, "padded micro-batches (packing=%s): %s", self.cfg.packing, why)
        return why is None

    def _lr_factor(self, step: int) -> float:
        warmup = self.cfg.warmup_steps
        return 1.0 if warmup == 0 else min(1.0, (step + 1) / warmup)

    def _check_batch(self, batch: FlatBatch) -> None:
        if not isinstance(batch, FlatBatch):
            raise BatchError(f"update needs a FlatBatch, got {type(batch).__name__}")
        if batch.num_sequences == 0 or batch.input_ids_BT.shape[1] == 0:
            raise BatchError("cannot train on an empty batch")
        vocab = self.model.config.get_text_config().vocab_size
        top = int(batch.input_ids_BT.max())
        if top >= vocab:
            raise BatchError(
                f"token id {top} >= the model's vocab size {vocab}: the batch was tokenized for "
                "another model (check model.path and the engine's tokenizer)"
            )


_MAX = torch.distributed.ReduceOp.MAX


class _null:
    """`with` target that yields an empty list (no router recording)."""

    def __enter__(self) -> list:
        return []

    def __exit__(self, *exc) -> None:
        return None


def _load_model(model_path: str, device: torch.device) -> tuple[nn.Module, torch.dtype]:
    """fp32 master weights on `device`; returns the model and the checkpoint's own dtype."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    saved = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    saved_dtype = getattr(torch, saved) if isinstance(saved, str) else (saved or torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.config.use_cache = False
    return model.to(device), saved_dtype


def _enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer in backward (non-reentrant: works under FSDP2)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(kwargs)
    else:
        model.gradient_checkpointing_enable(kwargs)


def _build_optimizer(model: nn.Module, cfg: LearnerConfig, device: torch.device):
    """AdamW; decay on matrices only (norm scales and biases keep their values)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), foreach=True, fused=False)


__all__ = ["Learner", "LearnerConfig"]
