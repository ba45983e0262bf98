"""LocalEngine's routed experts (MoE): for each request that asks, the top-k expert ids each
MoE layer's router chose at every position the engine forwarded, in SGLang 0.5.23's shape.

SGLang (`return_routed_experts` on GenerateReqInput, server flag `--enable-return-routed-experts`)
returns, in `meta_info["routed_experts"]`, base64 of int32 [positions, layers, top_k] for
positions [routed_experts_start_len, prompt + output - 1): every position whose forward produced a
token or fed a later one; the last sampled token is never forwarded. Here a request collects one
[positions, layers*top_k] chunk per forward (its prompt's from the prefill, one per decode step)
and answers the same span. Ids are sorted within a (position, layer): a set, as replay needs.

What it is not: a capture of anything but the router's own top-k (no weights, no logits).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from gspo_agents.moe_routes import RouterRecorder
from gspo_agents.rollout.local_batch import Prefill
from gspo_agents.rollout.local_request import Request


class EngineRoutes:
    """Router hooks on one model; `forward(rows)` records around a forward when a row asked."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._recorder = RouterRecorder(model)
        if not self._recorder.enabled:
            self._recorder.close()
            raise ValueError(
                f"return_routed_experts needs a mixture-of-experts model with top-k routers; "
                f"{type(model).__name__} has none (routing_replay_source=engine cannot work "
                "with it: use routing_replay_source=trainer, or a MoE model)"
            )

    @contextmanager
    def forward(self, rows: list[Request]):
        """Yields a list that gets [layers, rows*T, k] ids when some row wants routes."""
        if not any(r.routes_start is not None for r in rows):
            yield []
            return
        with self._recorder.recording() as box:
            yield box

    @staticmethod
    def keep_prefill(requests: list[Request], prefill: Prefill, ids_LNK: torch.Tensor) -> None:
        """Each request's prompt positions (its unique prompt's row, without left padding)."""
        rows, length = prefill.ids_UL.shape
        per_U = _positions_first(ids_LNK, rows)  # [U, length, layers*k]
        for i, request in enumerate(requests):
            if request.routes_start is None:
                continue
            u = i if prefill.row_of_B is None else int(prefill.row_of_B[i])
            request.routes.append(per_U[u, length - len(request.prompt) :])

    @staticmethod
    def keep_decode(rows: list[Request], ids_LNK: torch.Tensor) -> None:
        """One position per running row: the token it fed this step."""
        per_B = _positions_first(ids_LNK, len(rows))  # [B, 1, layers*k]
        for i, request in enumerate(rows):
            if request.routes_start is not None:
                request.routes.append(per_B[i])

    def close(self) -> None:
        self._recorder.close()


def _positions_first(ids_LNK: torch.Tensor, rows: int) -> torch.Tensor:
    layers, tokens, k = ids_LNK.shape
    per = ids_LNK.reshape(layers, rows, tokens // rows, k).permute(1, 2, 0, 3)
    return per.reshape(rows, tokens // rows, layers * k).to(torch.int32)
