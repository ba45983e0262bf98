"""Expert-activation volatility for mixture-of-experts models.

Volatility is the share of (token, layer) top-k expert sets that differ between the behaviour policy
(the weights at the start of an update) and the updated policy, on the same tokens. GSPO's sequence
ratio tolerates this churn without routing replay; the metric shows how much of it there is.

Routers are found by shape, not by name: a module whose forward returns (logits, weights, indices)
with integer indices (transformers' `*TopKRouter`), or a linear gate over `num_experts` outputs whose
top-k we take ourselves (older MoE blocks).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn


def find_routers(model: nn.Module) -> list[nn.Module]:
    config = getattr(model, "config", None)
    num_experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    if not num_experts:
        return []
    routers = []
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if type(module).__name__.endswith("Router") or leaf in ("gate", "router"):
            if (
                getattr(module, "weight", None) is not None
                and module.weight.shape[0] == num_experts
            ):
                routers.append(module)
    return routers


class RouterRecorder:
    """Records each router's top-k expert ids, [tokens, k] per layer, while `recording()`."""

    def __init__(self, model: nn.Module) -> None:
        self.routers = find_routers(model)
        self.top_k = int(getattr(model.config, "num_experts_per_tok", 0) or 0)
        self._active = False
        self._calls: list[torch.Tensor] = []
        self._handles = [r.register_forward_hook(self._hook) for r in self.routers]

    @property
    def enabled(self) -> bool:
        return bool(self.routers) and self.top_k > 0

    def _hook(self, module, inputs, output) -> None:
        if not self._active:
            return
        if isinstance(output, tuple) and not output[-1].is_floating_point():
            ids = output[-1]
        else:
            logits = output[0] if isinstance(output, tuple) else output
            ids = logits.topk(self.top_k, dim=-1).indices
        self._calls.append(ids.detach().reshape(-1, ids.shape[-1]).sort(dim=-1).values.cpu())

    @contextmanager
    def recording(self):
        """Yields a list that receives one [layers, tokens, k] tensor for the forward inside."""
        self._calls = []
        self._active = True
        box: list[torch.Tensor] = []
        try:
            yield box
        finally:
            self._active = False
            if self._calls:
                box.append(torch.stack(self._calls))
            self._calls = []

    def close(self) -> None:
        for h in self._handles:
            h.remove()


def differing_expert_sets(
    before_LNK: torch.Tensor, after_LNK: torch.Tensor, token_mask_N: torch.Tensor
) -> tuple[int, int]:
    """(number of differing (layer, token) expert sets, number compared) over masked tokens."""
    differ_LN = (before_LNK != after_LNK).any(dim=-1)
    mask = token_mask_N.bool().unsqueeze(0).expand_as(differ_LN)
    return int(differ_LN[mask].sum()), int(mask.sum())
