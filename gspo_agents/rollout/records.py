"""The rollout manager's typed input and output: RolloutConfig (frozen) and RolloutResult.

RolloutConfig is the single source of the rollout settings: the Hydra schema in
gspo_agents/config.py is derived from it (same fields, a mutable copy whose seed follows
`trainer.seed`). Holds no logic beyond validating the values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo_agents.rollout.engine import SamplingParams

if TYPE_CHECKING:  # trajectory.py imports torch; the Hydra schema imports this module
    from gspo_agents.trajectory import Trajectory

__all__ = ["RolloutConfig", "RolloutResult"]


@dataclass(frozen=True, slots=True)
class RolloutConfig:
    num_samples_per_task: int = 8  # G: samples per task, compared by the advantages
    max_new_tokens_per_turn: int = 256  # generation budget of one model turn
    max_context_tokens: int = 2048  # prompt + all turns; shrinks max_new_tokens as it fills
    max_turns: int | None = None  # None -> the env's own max_turns
    max_live_trajectories: int = 64  # trajectories in flight at once
    temperature: float = 1.0  # sampling temperature (the learner uses the same)
    top_p: float = 1.0  # nucleus sampling (1: the full support, as GSPO assumes)
    top_k: int = -1  # top-k sampling (-1: off)
    max_staleness_steps: int = 1  # async rollouts: how many weight versions behind a batch may be
    # partial rollouts: model tokens more than this many weight versions old leave the loss
    # (their trajectory trains on its fresher tokens); None keeps every token
    max_version_lag: int | None = None
    trajectory_timeout_s: float = 600.0  # whole-trajectory deadline (then status error)
    seed: int | None = None  # per-request sampling seeds: same seed, same samples, any batching
    # tool envs' call format: auto (the one the model's chat template teaches), hermes, qwen3_coder
    # or a parser registered with envs.tools.register_parser; env.kwargs.tool_parser overrides it
    tool_format: str = "auto"
    # assistant reasoning in a history the OpenAI endpoint renders from messages: keep (what was
    # generated; the history extends the engine's tokens) or strip (Qwen3's template rule: drop
    # <think>...</think> before the last user message; every such turn starts a new sequence)
    past_reasoning: str = "keep"
    # who drives a step's episodes: rank0 (the training loop's process drives them all) or
    # all_ranks (rank r of the torchrun world drives groups r, r+world, ...: its own engine
    # client, envs and sandbox against the same engine; rank 0 merges the shares)
    drivers: str = "rank0"
    # a spawned rollout worker process per driving rank drives its episodes, so the learner's
    # Python never shares a GIL with them (async mode's overlap); false: the training process's
    # own event loop drives them
    driver_process: bool = False

    def __post_init__(self) -> None:
        positive = (
            "num_samples_per_task",
            "max_new_tokens_per_turn",
            "max_context_tokens",
            "max_live_trajectories",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(
                f"rollout.max_turns must be >= 1 or None (env's own), got {self.max_turns}"
            )
        if self.max_staleness_steps < 0:
            raise ValueError(
                f"rollout.max_staleness_steps must be >= 0, got {self.max_staleness_steps}"
            )
        if self.trajectory_timeout_s <= 0:
            raise ValueError(
                f"rollout.trajectory_timeout_s must be > 0, got {self.trajectory_timeout_s}"
            )
        if self.past_reasoning not in ("keep", "strip"):
            raise ValueError(
                f"rollout.past_reasoning={self.past_reasoning!r} is not one of ['keep', 'strip']"
            )
        if self.drivers not in ("rank0", "all_ranks"):
            raise ValueError(
                f"rollout.drivers={self.drivers!r} is not one of ['rank0', 'all_ranks']"
            )
        # Validates temperature/top_p/top_k the same way every request will.
        SamplingParams(1, self.temperature, self.top_p, self.top_k)


@dataclass(slots=True)
class RolloutResult:
    # One list per task: its complete, truncated and error trajectories (stale ones are dropped).
    groups: list[list[Trajectory]]
    metrics: dict[str, float]

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for g in self.groups for t in g]
