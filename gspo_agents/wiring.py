"""The run's learner-side and bookkeeping pieces, built from the run config for `train.py`:
the learner (its own small config), the tracker, the held-out evaluation, and the sync that puts
the learner's start weights on the engine before step 1. Like `components.py` (the rollout side's
builders), each hands its piece only the settings it needs.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gspo_agents.config import ConfigError
from gspo_agents.tracking import RunTracker


def build_learner(cfg: DictConfig, model_dir: str):
    from gspo_agents.learner import Learner, LearnerConfig

    t, a = cfg.trainer, cfg.algorithm
    learner_cfg = LearnerConfig(
        algorithm=a.name,
        eps_low=a.eps_low,
        eps_high=a.eps_high,
        lr=t.lr,
        weight_decay=t.weight_decay,
        warmup_steps=t.warmup_steps,
        max_grad_norm=t.max_grad_norm,
        num_minibatches=t.num_minibatches,
        micro_batch_tokens=t.micro_batch_tokens,
        share_prompt_prefix=t.share_prompt_prefix,
        logprob_chunk_tokens=t.logprob_chunk_tokens,
        packing=t.packing,
        activation_checkpointing=t.activation_checkpointing,
        temperature=cfg.rollout.temperature,
        seed=t.seed,
        loss_agg=a.loss_agg,
        old_logprobs=a.old_logprobs,
        seq_is_cap=a.seq_is_cap,
        seq_mask_bound=a.seq_mask_bound,
        routing_replay=a.routing_replay,
        routing_replay_source=a.routing_replay_source,
        seq_is_ratio=a.seq_is_ratio,
        loss_norm_tokens=cfg.rollout.max_context_tokens,
        clip_ratio_c=a.clip_ratio_c,
        kl_coef=a.kl_coef,
        kl_estimator=a.kl_estimator,
        entropy_coef=a.entropy_coef,
        ppo_epochs=t.ppo_epochs,
        lora=lora_config(cfg),
    )
    return Learner(model_dir, learner_cfg)


def lora_config(cfg: DictConfig):
    from gspo_agents.models import LoraConfig

    lora = cfg.model.lora
    return LoraConfig(lora.rank, lora.alpha, tuple(lora.target_modules), lora.dropout)


def build_tracker(cfg: DictConfig, run_dir: Path, start_step: int) -> RunTracker:
    t = cfg.trainer
    return RunTracker(
        run_dir,
        config=OmegaConf.to_container(cfg, resolve=True),
        wandb_mode=cfg.logger.wandb_mode,
        wandb_project=cfg.logger.wandb_project,
        run_name=run_dir.name,
        total_steps=t.steps,
        resume=start_step > 0,
        console_every_steps=cfg.logger.console_every_steps,
        start_step=start_step,
        tensorboard=cfg.logger.tensorboard,
    )


def build_held_out(cfg: DictConfig, env, env_factory, tokenizer):
    """The held-out evaluation every `trainer.eval_every_steps` steps; None when that is 0."""
    if not cfg.trainer.eval_every_steps:
        return None
    from gspo_agents.eval import HeldOutEval

    return HeldOutEval(cfg, env, env_factory, tokenizer)


async def sync_start_weights(cfg: DictConfig, manager, learner, model_dir: str, start_step: int):
    """The engine runs what the learner starts from, before step 1: an SGLang worker launched
    on other weights (the base model of a cold-started run) is given them; a resumed run exports
    its checkpoint's weights first."""
    from gspo_agents.rollout.sglang_engine import StartWeightsMismatch

    weights = model_dir
    if start_step:
        run_dir = Path(cfg.trainer.run_dir)
        weights = learner.export_hf(str(run_dir / "weights" / f"step{start_step}"))
    try:
        await manager.sync_start_weights(weights, start_step)
    except StartWeightsMismatch as exc:
        raise ConfigError(f"{exc} (engine.urls={list(cfg.engine.urls)})") from None
