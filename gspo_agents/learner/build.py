"""How a Learner's parts are made from its config: the model, the optimizer, the fast paths.

- `load_model`: fp32 master weights of an HF causal LM, and the checkpoint's own dtype (export).
- `enable_activation_checkpointing`: recompute each decoder layer in backward.
- `build_optimizer`: AdamW with weight decay on matrices only.
- `prefix_sharing_blockers`: why `share_prompt_prefix` cannot be used in a setup (none: it can).

Construction only: nothing here trains, shards (parallel.py) or logs; the Learner decides what
to warn about.
"""

from __future__ import annotations

import torch
from torch import nn

from gspo_agents.learner.config import LearnerConfig


def load_model(model_path: str, device: torch.device) -> tuple[nn.Module, torch.dtype]:
    """fp32 master weights on `device`; returns the model and the checkpoint's own dtype."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    saved = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    saved_dtype = getattr(torch, saved) if isinstance(saved, str) else (saved or torch.float32)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.config.use_cache = False
    return model.to(device), saved_dtype


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer in backward (non-reentrant: works under FSDP2)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(kwargs)
    else:
        model.gradient_checkpointing_enable(kwargs)


def build_optimizer(model: nn.Module, cfg: LearnerConfig, device: torch.device):
    """AdamW; decay on matrices only (norm scales and biases keep their values)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), foreach=True, fused=False)


def prefix_sharing_blockers(cfg: LearnerConfig, *, distributed: bool, moe: bool) -> list[str]:
    """share_prompt_prefix needs one process, dense routing and a live KV cache: what is missing."""
    reasons = {
        "distributed (FSDP) training": distributed,
        "a mixture-of-experts model (the router probe needs one forward per micro-batch)": moe,
        "activation checkpointing (transformers disables the KV cache)": (
            cfg.activation_checkpointing
        ),
        "an entropy bonus (it needs every position's full logits)": cfg.entropy_coef > 0,
    }
    return [why for why, present in reasons.items() if present]
