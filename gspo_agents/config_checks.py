"""The run config's value checks: choices, ranges and the combinations that cannot work, each
a ConfigError naming the key and the fix (gspo_agents.config re-exports them). No torch here:
a typo must fail in a second."""

from __future__ import annotations

import difflib
import importlib.util
from typing import Any

CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("model", "name"): ("tiny", "tiny-agent", "tiny-moe", "hf"),
    ("engine", "kind"): ("local", "sglang"),
    ("engine", "pause_mode"): ("abort", "in_place", "retract"),
    ("engine", "update_mode"): ("disk", "nccl"),
    ("sandbox", "backend"): (
        "auto",
        "docker",
        "bubblewrap",
        "namespaces",
        "unsafe-local",
        "remote",
    ),  # fmt: skip
    ("trainer", "packing"): ("auto", "on", "off"),
    ("algorithm", "name"): ("gspo", "gspo_token", "grpo"),
    ("algorithm", "loss_agg"): (
        "seq-mean-token-mean",
        "token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
    ),
    ("algorithm", "kl_estimator"): ("k1", "k2", "k3"),
    ("algorithm", "seq_is_ratio"): ("geometric", "product"),
    ("algorithm", "old_logprobs"): ("engine", "recompute", "decoupled"),
    ("algorithm", "routing_replay_source"): ("trainer", "engine"),
    ("logger", "wandb_mode"): ("offline", "online", "disabled"),
    ("rollout", "past_reasoning"): ("keep", "strip"),
    ("rollout", "drivers"): ("rank0", "all_ranks"),
}


# Checked before any model is built, so a typo fails in seconds rather than after a cold start.
MUST_BE_POSITIVE: tuple[tuple[str, str], ...] = (
    ("trainer", "tasks_per_step"),
    ("trainer", "lr"),
    ("trainer", "num_minibatches"),
    ("trainer", "ppo_epochs"),
    ("trainer", "micro_batch_tokens"),
    ("trainer", "nproc"),
    ("rollout", "num_samples_per_task"),
    ("rollout", "max_new_tokens_per_turn"),
    ("rollout", "max_context_tokens"),
    ("sandbox", "max_concurrency"),
    ("engine", "update_bucket_mb"),
)
MUST_BE_NON_NEGATIVE: tuple[tuple[str, str], ...] = (
    ("trainer", "steps"),
    ("trainer", "save_every_steps"),
    ("trainer", "warmup_steps"),
    ("trainer", "logprob_chunk_tokens"),
    ("trainer", "max_failed_steps"),
    ("trainer", "eval_every_steps"),
    ("logger", "console_every_steps"),
    ("logger", "samples_every_steps"),
    ("logger", "samples_per_step"),
    ("algorithm", "dynamic_sampling_rounds"),
    ("algorithm", "overlong_penalty"),
    ("algorithm", "overlong_buffer"),
    ("algorithm", "kl_coef"),
    ("algorithm", "entropy_coef"),
)


class ConfigError(ValueError):
    """A config value or override that cannot work; the message names the key and the fix."""


def check_choices(cfg: Any) -> None:
    """Reject an invalid choice with the valid ones and a 'did you mean'; reject numbers out of
    range naming the key."""
    for group, key in MUST_BE_POSITIVE:
        if not cfg[group][key] > 0:
            raise ConfigError(f"{group}.{key} must be > 0, got {cfg[group][key]}")
    for group, key in MUST_BE_NON_NEGATIVE:
        if not cfg[group][key] >= 0:
            raise ConfigError(f"{group}.{key} must be >= 0, got {cfg[group][key]}")
    for (group, key), valid in CHOICES.items():
        value = cfg[group][key]
        if value not in valid:
            close = difflib.get_close_matches(str(value), valid, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{group}.{key}={value!r} is not valid; choose one of {', '.join(valid)}.{hint}"
            )
    if cfg.logger.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "logger.tensorboard=true needs the tensorboard package: pip install tensorboard "
            "(or pip install -e '.[tensorboard]')"
        )
    if cfg.trainer.eval_every_steps and not cfg.eval.k >= 1:
        raise ConfigError(f"eval.k must be >= 1 for trainer.eval_every_steps, got {cfg.eval.k}")
    if cfg.rollout.num_samples_per_task < 2:
        raise ConfigError(
            f"rollout.num_samples_per_task={cfg.rollout.num_samples_per_task}: GSPO's advantages "
            "compare samples of one task, and a group of 1 has no spread, so nothing would be "
            "trained; use 2 or more (e.g. 8)"
        )
    if not 0.0 <= cfg.algorithm.turn_discount <= 1.0:
        raise ConfigError(
            f"algorithm.turn_discount must be in [0, 1], got {cfg.algorithm.turn_discount}"
        )
    _check_agent(cfg)  # before the torch import below: an agent typo fails in a second
    from gspo_agents.offpolicy import OffPolicyConfig

    a = cfg.algorithm
    try:
        OffPolicyConfig(a.old_logprobs, a.seq_is_cap, a.seq_mask_bound, a.seq_is_ratio)
    except ValueError as exc:
        raise ConfigError(f"algorithm: {exc}") from None
    _check_new_options(cfg)
    if a.routing_replay_source == "engine" and not a.routing_replay:
        raise ConfigError(
            "algorithm.routing_replay_source=engine chooses whose routes routing replay uses; "
            "it does nothing without algorithm.routing_replay=true (set both)"
        )
    if cfg.rollout.driver_process and cfg.trainer.eval_every_steps:
        raise ConfigError(
            "rollout.driver_process=true drives the episodes in a worker process, and the "
            "held-out evaluation (trainer.eval_every_steps) needs the engine in the training "
            "process; set one of them off"
        )
    if cfg.algorithm.dynamic_sampling_rounds and cfg.trainer.async_rollouts:
        raise ConfigError(
            "algorithm.dynamic_sampling_rounds refills a step's groups with extra synchronous "
            "rollouts; it cannot be combined with trainer.async_rollouts=true"
        )
    _check_lora(cfg.model.lora)
    if cfg.model.name == "hf" and not cfg.model.path:
        raise ConfigError(
            "model=hf needs model.path=/path/to/hf/dir (a local Hugging Face directory)"
        )
    if cfg.sandbox.backend == "remote" and not cfg.sandbox.urls:
        raise ConfigError(
            "sandbox=remote needs sandbox.urls=[http://host:port,...] (`python -m sandbox "
            "serve` instances or their load balancer; the token comes from GSPO_SANDBOX_TOKEN)"
        )
    if cfg.sandbox.docker_hosts and cfg.sandbox.backend not in ("docker", "auto"):
        raise ConfigError(
            f"sandbox.docker_hosts={list(cfg.sandbox.docker_hosts)} is for sandbox=docker; "
            f"sandbox={cfg.sandbox.backend} would ignore it: drop it or choose sandbox=docker"
        )
    if cfg.engine.kind == "sglang" and not cfg.engine.urls:
        raise ConfigError(
            "engine=sglang needs engine.urls=[http://host:port,...] (workers or a router)"
        )
    if cfg.engine.kind == "local" and cfg.engine.update_mode != "disk":
        raise ConfigError(
            f"engine.update_mode={cfg.engine.update_mode} needs engine=sglang: the local engine "
            "runs in the trainer's process and takes the weights directly; drop the override"
        )


def _check_lora(lora: Any) -> None:
    """The LoRA keys (here, not in gspo_agents.models: this check must not import torch)."""
    if lora.rank < 0:
        raise ConfigError(f"model.lora.rank must be >= 0 (0: full fine-tuning), got {lora.rank}")
    if not lora.rank:
        return
    if not lora.alpha > 0:
        raise ConfigError(f"model.lora.alpha must be > 0, got {lora.alpha}")
    if not 0.0 <= lora.dropout < 1.0:
        raise ConfigError(f"model.lora.dropout must be in [0, 1), got {lora.dropout}")
    if not lora.target_modules:
        raise ConfigError(
            "model.lora.target_modules is empty; name the linear layers to adapt, e.g. "
            "[q_proj,k_proj,v_proj,o_proj]"
        )


def _check_new_options(cfg: Any) -> None:
    a, r = cfg.algorithm, cfg.rollout
    if a.clip_ratio_c is not None and (a.name != "grpo" or not a.clip_ratio_c > 1):
        raise ConfigError(
            f"algorithm.clip_ratio_c={a.clip_ratio_c} (dual clip) bounds token-level ratios: it "
            "needs algorithm=grpo and a value > 1 (e.g. 3)"
        )
    if a.overlong_buffer and a.overlong_buffer >= r.max_new_tokens_per_turn:
        raise ConfigError(
            f"algorithm.overlong_buffer={a.overlong_buffer} must be smaller than "
            f"rollout.max_new_tokens_per_turn={r.max_new_tokens_per_turn} (DAPO: 4096 of 20480)"
        )
    if r.max_version_lag is not None and r.max_version_lag < 0:
        raise ConfigError(f"rollout.max_version_lag must be >= 0 or null, got {r.max_version_lag}")


def _check_agent(cfg: Any) -> None:
    """`agent.entry`: the loop resolves (did-you-mean on its name) and the run's options apply."""
    entry = cfg.get("agent", {}).get("entry")
    if not entry:
        return
    refused = {
        "trainer.async_rollouts": (
            cfg.trainer.async_rollouts,
            "the endpoint records an agent's session under one weight version at a time, and "
            "the agent path has no prefetch of the next step's episodes",
        ),
        "trainer.eval_every_steps": (
            cfg.trainer.eval_every_steps,
            "the held-out evaluation plays the env's own episode loop, not your agent",
        ),
    }
    for key, (value, why) in refused.items():
        if value:
            raise ConfigError(f"agent={entry} cannot run with {key}={value}: {why}; drop it")
    from gspo_agents.agents import load_agent  # imports the user's module only, not torch

    load_agent(entry)
