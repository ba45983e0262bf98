"""The learner's own config schema: what one GSPO update needs, nothing about rollouts or envs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gspo_agents.models import LoraConfig
from gspo_agents.objectives import KL_ESTIMATORS, LOSS_AGGS, get_objective
from gspo_agents.offpolicy import OffPolicyConfig

MixedPrecision = Literal["auto", "fp32", "bf16"]
REPLAY_SOURCES = ("trainer", "engine")  # learner/moe.py: whose routes routing_replay replays


@dataclass(frozen=True, slots=True)
class LearnerConfig:
    algorithm: Literal["gspo", "gspo_token", "grpo"] = "gspo"
    eps_low: float | None = None  # None: the algorithm's default (GSPO 3e-4, GRPO 0.2)
    eps_high: float | None = None  # None: the algorithm's default (GSPO 4e-4, GRPO 0.27)
    lr: float = 1e-4
    weight_decay: float = 0.0  # AdamW decoupled decay, on matrices only (not norms or biases)
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0  # optimizer steps of linear warm-up, then constant
    max_grad_norm: float = 1.0  # clip the global grad norm to this; <= 0 disables clipping
    num_minibatches: int = 4  # optimizer steps per rollout batch
    micro_batch_tokens: int = 4096  # tokens per forward/backward: packed, or rows x longest row
    # the output layer runs this many positions at a time (0: full [B, T, V] logits, as before)
    logprob_chunk_tokens: int = 1024
    # one padding-free row per micro-batch: auto where the attention kernel skips cross-document
    # blocks (FlashAttention varlen, FlexAttention), on with any kernel that reads packed
    # position ids (SDPA / eager: exact, but attention over the whole packed row), off
    packing: str = "auto"
    temperature: float = 1.0  # the rollout temperature: log-probs are log_softmax(logits / T)
    activation_checkpointing: bool = False
    mixed_precision: MixedPrecision = (
        "auto"  # auto: bf16 params with fp32 reduce on CUDA, fp32 on CPU
    )
    share_prompt_prefix: bool = False  # forward each group's common prompt once (single process)
    seed: int = 0
    loss_agg: str = "seq-mean-token-mean"  # or token-mean, seq-mean-token-sum
    # the clip anchor pi_old: engine (behaviour log-probs), recompute (the trainer's, before the
    # update) or decoupled (trainer's anchor x behaviour importance weight); see offpolicy.py
    old_logprobs: str = "engine"
    seq_is_cap: float | None = None  # truncated importance sampling: cap on the weight
    seq_mask_bound: float | None = None  # drop sequences with |log(pi_trainer/pi_engine)| > bound
    routing_replay: bool = False  # MoE: replay the old policy's experts in the trainer's forward
    # whose routes are replayed: the trainer's own at the start of the update, or the engine's
    # (the batch's engine_routes, the routes that produced the sampled tokens; learner/moe.py)
    routing_replay_source: str = "trainer"
    seq_is_ratio: str = "geometric"  # sequence IS weight: geometric (mean) | product (sum)
    loss_norm_tokens: int = 2048  # seq-mean-token-sum-norm's constant (the longest trajectory)
    clip_ratio_c: float | None = None  # dual clip of token ratios when A < 0 (grpo)
    kl_coef: float = 0.0  # KL to a frozen reference (the model the learner starts from)
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0  # entropy bonus
    ppo_epochs: int = 1  # passes over each rollout batch
    # LoRA adapters instead of full fine-tuning (rank 0: off); the frozen base is the KL reference
    lora: LoraConfig = LoraConfig()

    @property
    def off_policy(self) -> OffPolicyConfig:
        return OffPolicyConfig(
            self.old_logprobs, self.seq_is_cap, self.seq_mask_bound, self.seq_is_ratio
        )

    def __post_init__(self) -> None:
        get_objective(self.algorithm)  # raises with the valid names
        self.off_policy  # noqa: B018 (validates old_logprobs, seq_is_cap, seq_mask_bound)
        if self.loss_agg not in LOSS_AGGS:
            raise ValueError(
                f"LearnerConfig.loss_agg={self.loss_agg!r}; choose one of {', '.join(LOSS_AGGS)}"
            )
        positive = {
            "lr": self.lr,
            "num_minibatches": self.num_minibatches,
            "micro_batch_tokens": self.micro_batch_tokens,
            "temperature": self.temperature,
            "ppo_epochs": self.ppo_epochs,
            "loss_norm_tokens": self.loss_norm_tokens,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"LearnerConfig.{name} must be > 0, got {value!r}")
        if self.routing_replay_source not in REPLAY_SOURCES:
            raise ValueError(
                f"LearnerConfig.routing_replay_source={self.routing_replay_source!r}; choose one "
                f"of {', '.join(REPLAY_SOURCES)}"
            )
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"LearnerConfig.kl_estimator={self.kl_estimator!r}; choose one of "
                f"{', '.join(KL_ESTIMATORS)}"
            )
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError("LearnerConfig.kl_coef and entropy_coef must be >= 0")
        if self.clip_ratio_c is not None and (
            self.algorithm != "grpo" or not self.clip_ratio_c > 1
        ):
            raise ValueError("LearnerConfig.clip_ratio_c needs algorithm=grpo and a value > 1")
        if self.packing not in ("auto", "on", "off"):
            raise ValueError(f"LearnerConfig.packing={self.packing!r}; choose auto, on or off")
        if self.logprob_chunk_tokens < 0:
            raise ValueError(
                "LearnerConfig.logprob_chunk_tokens must be >= 0 (0: full logits), "
                f"got {self.logprob_chunk_tokens}"
            )
        if self.warmup_steps < 0:
            raise ValueError(f"LearnerConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.mixed_precision not in ("auto", "fp32", "bf16"):
            raise ValueError(
                f"LearnerConfig.mixed_precision={self.mixed_precision!r}; choose auto, fp32 or bf16"
            )
