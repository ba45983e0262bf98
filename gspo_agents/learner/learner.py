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

This file is the `Learner`: its public API, the update loop, one minibatch's micro-batched
loss and optimizer step, and the forward every pass shares (`forward.Forward`, which it
implements: the passes beside it reach the model only through that). Beside it by role:
- `prepass`: the old policy's and the frozen reference's passes before the first step;
- `probe`: what the first minibatch measures (engine gap, expert volatility);
- `build`: the model, optimizer and fast-path checks made from the config;
- `checkpoint`, `parallel`, `head`, `packing`, `prefix`, `moe`: saving, FSDP2, the chunked
  log-prob head, packed rows, prompt-prefix sharing, router hooks.

It does not know about engines, HTTP or environments: weights leave as an HF directory
(`export_hf`) and trajectories arrive as a `FlatBatch`.

Shape legend: B rows of the batch, T padded positions, V vocabulary.
"""

from __future__ import annotations

import logging
import math
import time

import torch

from gspo_agents.learner import checkpoint
from gspo_agents.learner.batching import (
    packed_microbatches,
    rank_rows,
    split_minibatches,
    token_budget_microbatches,
)
from gspo_agents.learner.build import (
    build_optimizer,
    enable_activation_checkpointing,
    load_model,
    prefix_sharing_blockers,
)
from gspo_agents.learner.config import LearnerConfig
from gspo_agents.learner.errors import BatchError
from gspo_agents.learner.forward import Rows
from gspo_agents.learner.head import TokenHead
from gspo_agents.learner.lora import apply_lora, reference_mode
from gspo_agents.learner.moe import routes_for_microbatch
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
from gspo_agents.learner.prepass import pre_update
from gspo_agents.learner.probe import (
    PreUpdate,
    Probe,
    expert_volatility,
    probe_metrics,
    record_probe,
    version_lag,
)
from gspo_agents.learner.regularizers import load_reference
from gspo_agents.learner.stats import MinibatchStats, masked_mean, mean_over
from gspo_agents.logprobs import TokenStats
from gspo_agents.moe_routes import RouterRecorder
from gspo_agents.objectives import get_objective, policy_loss
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
        self.model, self._export_dtype = load_model(self.model_path, self.device)
        self._routers = RouterRecorder(self.model)  # hooks before sharding: plain module paths
        if cfg.activation_checkpointing:
            enable_activation_checkpointing(self.model)
        if cfg.lora.enabled:  # adapters on a frozen base; the base is also the KL reference
            self.model = apply_lora(self.model, cfg.lora)
        self._ref = (
            load_reference(self.model_path, self.device, self._info.distributed, self._bf16)
            if cfg.kl_coef > 0 and not cfg.lora.enabled
            else None
        )
        if self._info.distributed:
            shard_model(self.model, self._bf16)
        # single-process CUDA gets bf16 through autocast; under FSDP the MixedPrecisionPolicy does it
        self._autocast = self._bf16 and not self._info.distributed
        self.optimizer = build_optimizer(self.model, cfg, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self._objective = get_objective(cfg.algorithm)
        self._share_prefix = cfg.share_prompt_prefix and self._prefix_sharing_supported()
        reference = self.model if cfg.lora.enabled else self._ref  # LoRA: adapters disabled
        self._ref_head = (  # the reference's log-probs by the same chunked path
            TokenHead(reference, cfg.temperature, cfg.logprob_chunk_tokens)
            if cfg.kl_coef > 0
            else None
        )
        self._head = TokenHead(
            self.model, cfg.temperature, cfg.logprob_chunk_tokens, entropy_grad=cfg.entropy_coef > 0
        )
        self._pack = cfg.packing != "off" and not self._share_prefix and self._packing_supported()
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
        pre = pre_update(self, batch, lengths)
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
                volatility = expert_volatility(self, batch, probe)
        metrics = mean_over(per_minibatch)
        # before any weight changed: the clipping that staleness and numerics alone cause
        metrics["clip_frac_tokens_first_mb"] = per_minibatch[0]["clip_frac_tokens"]
        metrics["clip_frac_seqs_first_mb"] = per_minibatch[0]["clip_frac_seqs"]
        metrics.update(probe_metrics(probe, self._info, self.device))
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

    @torch.no_grad()
    def compute_logprobs(self, batch: FlatBatch) -> torch.Tensor:
        """The current policy's log-probs of every token, [B, T] on CPU. All ranks call."""
        self._check_batch(batch)
        self.model.eval()
        lengths = batch.attention_mask_BT.sum(dim=1).tolist()
        out_BT = torch.zeros(batch.input_ids_BT.shape, dtype=torch.float32, device=self.device)
        mine = rank_rows(list(range(batch.num_sequences)), self.rank, self.world_size)
        for rows in self.synced_microbatches(batch, mine, lengths):
            lp_BT = self.policy_logprobs(self.microbatch(batch, rows, lengths))
            if rows is not None:
                out_BT[rows, : lp_BT.shape[1]] = lp_BT
        return all_reduce_(out_BT, self._info).cpu()

    def export_hf(self, out_dir: str) -> str:
        """Write the full model as an HF directory (rank 0); all ranks call. Returns out_dir.
        A LoRA model's directory holds the merged weights, and the adapter alone in its
        `adapter/` subdirectory (PEFT format, for engines that load adapters)."""
        return checkpoint.export_hf(
            out_dir, self._info, self.model, self.model_path, self._export_dtype
        )

    @property
    def trainable_parameters(self) -> int:
        """Parameters the optimizer updates (the adapters alone under LoRA)."""
        return sum(p.numel() for g in self.optimizer.param_groups for p in g["params"])

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
        micro = self.synced_microbatches(batch, mine, lengths)
        num_tokens = int(batch.loss_mask_BT[rows].sum())
        for j, micro_rows in enumerate(micro):
            set_gradient_sync(self.model, j == len(micro) - 1)
            mb = self.microbatch(batch, micro_rows, lengths)
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
            with self._routers.recording_if(record) as routes:
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
                record_probe(probe, micro_rows, lp_BT, mb, routes, engine, self.device)
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

    # ----------------------------------------------------------------------------------------
    # the forward the passes share (forward.Forward; prepass.py and probe.py use only this)
    # ----------------------------------------------------------------------------------------
    @property
    def process(self) -> ProcessInfo:
        return self._info

    @property
    def routers(self) -> RouterRecorder:
        return self._routers

    def policy_logprobs(self, mb: FlatBatch) -> torch.Tensor:
        """The policy's log-probs [B, T] of a micro-batch, by the training forward."""
        return self._token_stats(mb).logprobs_BT

    def reference_logprobs(self, mb: FlatBatch) -> torch.Tensor:
        """The frozen reference's log-probs [B, T] (padded rows; `kl_coef > 0` only)."""
        if self._ref_head is None:
            raise RuntimeError("reference_logprobs needs kl_coef > 0 (no reference loaded)")
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self._autocast)
        with autocast, reference_mode(self.model):  # LoRA: the frozen base, adapters off
            stats = self._ref_head(
                mb.input_ids_BT.to(self.device),
                attention_mask=mb.attention_mask_BT.to(self.device),
            )
        return stats.logprobs_BT

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
    def synced_microbatches(
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
    def microbatch(batch: FlatBatch, rows: Rows, lengths: list[int]) -> FlatBatch:
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
    def _prefix_sharing_supported(self) -> bool:
        """share_prompt_prefix needs one process, dense routing and a live KV cache."""
        off = prefix_sharing_blockers(
            self.cfg, distributed=self._info.distributed, moe=self._routers.enabled
        )
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


__all__ = ["Learner", "LearnerConfig"]
