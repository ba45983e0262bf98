"""Router hooks on a mixture-of-experts model: find its top-k routers, record the experts each
token was routed to, replay given experts. Shared by both sides, which never import each other:
the learner (routing replay and expert volatility, `gspo_agents.learner.moe`) and the local engine
(the routed experts it returns, `gspo_agents.rollout.local_routes`).

Routers are found by shape, not by name: a module whose forward returns (logits, weights, indices)
with integer indices (transformers' `*TopKRouter`), or a linear gate over `num_experts` outputs whose
top-k we take ourselves (older MoE blocks; recording only, no replay).

Shape legend: L MoE layers, N tokens of a forward (rows x positions), K experts per token (top-k).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import nn

__all__ = ["RouterRecorder", "find_routers"]


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
    """Records each router's top-k expert ids, [tokens, k] per layer, while `recording()`; replaces
    them with given ids while `replaying(...)` is set."""

    def __init__(self, model: nn.Module) -> None:
        self.routers = find_routers(model)
        self.top_k = int(getattr(model.config, "num_experts_per_tok", 0) or 0)
        self.norm_topk_prob = bool(getattr(model.config, "norm_topk_prob", True))
        self._layer = {id(r): i for i, r in enumerate(self.routers)}
        self._active = False
        self._calls: list[torch.Tensor] = []
        self._replay_LNK: torch.Tensor | None = None
        self._handles = [r.register_forward_hook(self._hook) for r in self.routers]

    @property
    def enabled(self) -> bool:
        return bool(self.routers) and self.top_k > 0

    def _hook(self, module, inputs, output):
        if self._active:  # the router's own choice, before any replay
            if isinstance(output, tuple) and not output[-1].is_floating_point():
                ids = output[-1]
            else:
                logits = output[0] if isinstance(output, tuple) else output
                ids = logits.topk(self.top_k, dim=-1).indices
            self._calls.append(ids.detach().reshape(-1, ids.shape[-1]).sort(dim=-1).values.cpu())
        if self._replay_LNK is not None:
            return self._replayed(module, output)
        return None

    def _replayed(self, module, output):
        if not (isinstance(output, tuple) and len(output) == 3):
            raise RuntimeError(
                f"routing replay needs a router returning (logits, weights, indices); "
                f"{type(module).__name__} returns {type(output).__name__}"
            )
        logits, _, _ = output
        ids = self._replay_LNK[self._layer[id(module)]].to(logits.device)
        if ids.shape[0] != logits.shape[0]:
            raise RuntimeError(
                f"routing replay has {ids.shape[0]} tokens for a forward of {logits.shape[0]}"
            )
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights = probs.gather(-1, ids)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return logits, weights.to(logits.dtype), ids

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

    def recording_if(self, record: bool) -> AbstractContextManager[list[torch.Tensor]]:
        """`recording()` when `record`, else a context that yields an empty list."""
        return self.recording() if record else nullcontext([])

    def replay(self, routes_LNK: torch.Tensor | None) -> None:
        """Replay these expert ids ([layers, tokens, k]) in every forward until `replay(None)`.
        Kept set through backward, so activation checkpointing recomputes the same routing."""
        if routes_LNK is not None and routes_LNK.shape[0] != len(self.routers):
            raise ValueError(f"{routes_LNK.shape[0]} layers of routes for {len(self.routers)}")
        self._replay_LNK = routes_LNK

    def close(self) -> None:
        for h in self._handles:
            h.remove()
