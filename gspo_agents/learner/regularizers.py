"""What the KL penalty needs from models: the frozen reference policy (the per-token entropy of
the entropy bonus comes from the chunked head, `gspo_agents.logprobs`). The loss terms themselves are pure functions in `gspo_agents.objectives`.

The reference is the model the learner starts from (the cold-start / SFT weights, `model_path`),
held frozen on every learner rank (sharded like the policy under FSDP): one more copy of the
parameters, no gradients or optimizer state, i.e. +1x parameter memory next to the policy's
~4x (weights, gradients, Adam's two moments). Its log-probs cost one forward per row per update,
in the pre-update pass, and are kept as one [B, T] float tensor.

Shape legend: B rows, T positions, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn


def load_reference(
    model_path: str, device: torch.device, distributed: bool, bf16: bool
) -> nn.Module:
    """The frozen reference policy: `model_path`'s weights, eval mode, no gradients."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
    model.config.use_cache = False
    model.eval().requires_grad_(False)
    if distributed:
        from gspo_agents.learner.parallel import shard_model

        shard_model(model, bf16)
    return model
