"""The one interface between the learner's passes and its model: `Forward`.

The passes around an update (prepass.py: the old policy's and the reference's log-probs before
the first step; probe.py: expert volatility after it) run forwards of the policy or the frozen
reference over the batch in the same synced micro-batches as training, and record or replay
router choices. They reach the model only through this Protocol, which the `Learner` implements;
they never touch its private helpers, and nothing here imports the learner.

Shape legend: B rows of a micro-batch, T padded positions.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from gspo_agents.learner.config import LearnerConfig
from gspo_agents.learner.parallel import ProcessInfo
from gspo_agents.moe_routes import RouterRecorder
from gspo_agents.trajectory import FlatBatch

Rows = list[int] | None  # None: a dummy micro-batch that keeps FSDP collectives in step


class Forward(Protocol):
    """What a pass may ask of the learner's model (all ranks call every method together)."""

    cfg: LearnerConfig
    model: nn.Module  # the policy (a pass sets eval mode; the update sets train mode back)
    device: torch.device

    @property
    def process(self) -> ProcessInfo:
        """This process's rank, world size and device (for reductions over ranks)."""
        ...

    @property
    def routers(self) -> RouterRecorder:
        """The policy's router hooks (MoE; `enabled` is False for a dense model)."""
        ...

    def synced_microbatches(
        self, batch: FlatBatch, rows: list[int], lengths: list[int]
    ) -> list[Rows]:
        """This rank's micro-batches of `rows`, padded with dummies to the most any rank has."""
        ...

    def microbatch(self, batch: FlatBatch, rows: Rows, lengths: list[int]) -> FlatBatch:
        """The rows of one micro-batch (a zero-loss dummy row for None)."""
        ...

    def policy_logprobs(self, mb: FlatBatch) -> torch.Tensor:
        """The policy's log-probs [B, T] of a micro-batch (with gradient unless disabled)."""
        ...

    def reference_logprobs(self, mb: FlatBatch) -> torch.Tensor:
        """The frozen reference's log-probs [B, T] (only when the loss has a KL term)."""
        ...
