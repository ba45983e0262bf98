"""Mixture-of-experts support in the learner: routes per row for routing replay, and expert volatility.

- Expert volatility (the GSPO paper's measure): for each response token and layer, the fraction of
  its k activated experts that are no longer activated after one update, on the same tokens;
  averaged over (token, layer). The older, coarser measure, the share of (token, layer) top-k sets
  that differ at all over every token including the prompt, is kept as `expert_set_change_frac`.
- Routing replay: the experts chosen by the old policy (the weights at the start of an update) are
  replayed in the trainer's forward, so a token ratio compares the same sub-network; the router's
  gradient flows through the gate probabilities of the replayed experts. An option for GRPO and
  GSPO; GSPO's claim is that it does not need it. The replayed routes are the trainer's own
  (`routing_replay_source=trainer`) or the engine's, the ones that produced the sampled tokens and
  the engine's log-probs (`engine`, `with_engine_routes`; SGLang's `return_routed_experts`).

The router hooks themselves (`RouterRecorder`) live in `gspo_agents.moe_routes`, where the
rollout side may import them too; this file is the learner's use of them.
"""

from __future__ import annotations

import torch


def routes_per_row(
    routes_LNK: torch.Tensor, num_rows: int, lengths: list[int]
) -> list[torch.Tensor]:
    """Cut a micro-batch's recorded routes [L, rows*T, k] into each row's [L, length, k]."""
    L, N, K = routes_LNK.shape
    per = routes_LNK.reshape(L, num_rows, N // num_rows, K)
    return [per[:, i, : lengths[i]].clone() for i in range(num_rows)]


def routes_for_microbatch(rows: list[torch.Tensor], T: int, k: int) -> torch.Tensor:
    """Stack rows' routes [L, length, k] into [L, rows*T, k]; padding positions get experts 0..k-1."""
    L = rows[0].shape[0]
    out = torch.arange(k, dtype=rows[0].dtype).expand(L, len(rows), T, k).clone()
    for i, r in enumerate(rows):
        n = min(r.shape[1], T)
        out[:, i, :n] = r[:, :n]
    return out.reshape(L, len(rows) * T, k)


def differing_expert_sets(
    before_LNK: torch.Tensor, after_LNK: torch.Tensor, token_mask_N: torch.Tensor
) -> tuple[int, int]:
    """(number of differing (layer, token) expert sets, number compared) over masked tokens."""
    differ_LN = (before_LNK != after_LNK).any(dim=-1)
    mask = token_mask_N.bool().unsqueeze(0).expand_as(differ_LN)
    return int(differ_LN[mask].sum()), int(mask.sum())


def changed_experts(
    before_LNK: torch.Tensor, after_LNK: torch.Tensor, token_mask_N: torch.Tensor
) -> tuple[int, int]:
    """(activated experts no longer activated, activated experts compared) over masked tokens and
    every layer: the numerator and denominator of the paper's expert volatility."""
    still_LNK = (before_LNK[..., :, None] == after_LNK[..., None, :]).any(dim=-1)
    changed_LN = (~still_LNK).sum(dim=-1)
    mask = token_mask_N.bool().unsqueeze(0).expand_as(changed_LN)
    return int(changed_LN[mask].sum()), int(mask.sum()) * before_LNK.shape[-1]


def with_engine_routes(
    trainer_routes: dict[int, torch.Tensor],
    engine_routes: list[torch.Tensor | None] | None,
    layers: int,
    top_k: int,
) -> dict[int, torch.Tensor]:
    """Each row's routes to replay with `routing_replay_source=engine`: the engine's at every
    position it reported (the prompt, environment tokens and every model token but the last: the
    positions whose forward produced a sampled token or fed one), the trainer's old-policy routes
    at the rest (the final token, which no engine forward took as input, so no log-prob depends
    on it). Engine routes arrive as [positions, layers*top_k] (SGLang's routed_experts order:
    token, layer, k)."""
    out: dict[int, torch.Tensor] = {}
    for row, trainer_LNK in trainer_routes.items():
        got = engine_routes[row] if engine_routes is not None else None
        if got is None:
            raise ValueError(
                f"routing_replay_source=engine but row {row} of the batch carries no engine "
                "routes: the engine did not return routed experts for its trajectory"
            )
        if got.shape[1] != layers * top_k:
            raise ValueError(
                f"engine routes of width {got.shape[1]} for a model with {layers} MoE layers x "
                f"top-{top_k} = {layers * top_k}: the engine serves a different model"
            )
        length = trainer_LNK.shape[1]
        if not length - 1 <= got.shape[0] <= length:
            raise ValueError(
                f"row {row} has engine routes for {got.shape[0]} positions but {length} tokens "
                f"(expected {length - 1}: every position but the last)"
            )
        n = got.shape[0]
        replay_LNK = trainer_LNK.clone()
        engine_LNK = got[:n].reshape(n, layers, top_k).permute(1, 0, 2)
        replay_LNK[:, :n] = engine_LNK.sort(dim=-1).values.to(replay_LNK.dtype)
        out[row] = replay_LNK
    return out
