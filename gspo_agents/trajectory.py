"""Trajectories, token in / token out, and their flattening into padded learner tensors.

A trajectory is the prompt ids followed by segments that alternate between the model and the
environment. Model segments carry the engine's own per-token log-probs and the weight version that
produced each token (a partial rollout resumed under new weights mixes versions). Env segments are
observation tokens the model did not produce; they are masked out of the loss.

Ids are only ever appended: the learner sees byte for byte what the engine saw. Nothing here
decodes, re-tokenizes or re-applies a chat template.

This module is pure bookkeeping: no model, no I/O.

Shape legend: B = trajectories in the batch, T = padded sequence length.
Every [B, T] tensor is indexed by token position t: `old_logprobs_BT[b, t]` is the log-prob of
`input_ids_BT[b, t]` given the tokens before it, and `loss_mask_BT[b, t]` is 1 where that token was
sampled by the model.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from dataclasses import dataclass, field
from typing import Literal

import torch

__all__ = [
    "Segment",
    "Status",
    "Trajectory",
    "FlatBatch",
    "flatten",
]


class Status(str, enum.Enum):
    COMPLETE = "complete"  # the environment terminated the episode
    TRUNCATED = "truncated"  # a length or turn budget ended it
    PARTIAL = "partial"  # interrupted (weight update); to be resumed
    ERROR = "error"  # infrastructure or environment failure: never trained on as reward 0


@dataclass(slots=True)
class Segment:
    kind: Literal["model", "env"]
    token_ids: list[int]
    logprobs: list[float] | None = None  # model segments only, one per token
    versions: list[int] | None = None  # model segments only, one per token

    def __post_init__(self) -> None:
        if self.kind == "model":
            n = len(self.token_ids)
            if self.logprobs is None or len(self.logprobs) != n:
                raise ValueError(f"model segment needs one log-prob per token ({n} tokens)")
            if self.versions is None or len(self.versions) != n:
                raise ValueError(f"model segment needs one weight version per token ({n} tokens)")
        elif self.kind != "env":
            raise ValueError(f"segment kind must be 'model' or 'env', got {self.kind!r}")


@dataclass(slots=True)
class Trajectory:
    prompt_ids: list[int]
    task_id: str = ""
    group_id: str = ""
    segments: list[Segment] = field(default_factory=list)
    status: Status = Status.PARTIAL
    reward: float | None = None
    turn_rewards: list[float] = field(default_factory=list)  # one per finished model turn
    num_turns: int = 0
    error: str | None = None
    info: dict = field(default_factory=dict)
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    turn_open: bool = False  # the last model segment may still grow (generation was interrupted)
    # The engine's routed experts (MoE), int32 [positions, layers*top_k] for token positions
    # [0, positions): each position as the request that first forwarded it routed it. None: the
    # engine returned none. Appended turn by turn (`append_routes`).
    routes: torch.Tensor | None = field(default=None, compare=False, repr=False)

    # -- building -----------------------------------------------------------------------------
    def append_model(
        self,
        token_ids: list[int],
        logprobs: list[float],
        version: int,
        versions: list[int] | None = None,
    ) -> None:
        """Append sampled tokens; continues the last model segment if it is still open.
        `versions`: one weight version per token when they differ (else all are `version`)."""
        if not token_ids:
            return
        if len(logprobs) != len(token_ids):
            raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} log-probs")
        if versions is not None and len(versions) != len(token_ids):
            raise ValueError(f"{len(token_ids)} tokens but {len(versions)} versions")
        per_token = list(versions) if versions is not None else [version] * len(token_ids)
        last = self.segments[-1] if self.segments else None
        if last is not None and last.kind == "model" and self.turn_open:
            last.token_ids.extend(token_ids)
            last.logprobs.extend(logprobs)  # type: ignore[union-attr]
            last.versions.extend(per_token)  # type: ignore[union-attr]
        else:
            self.segments.append(Segment("model", list(token_ids), list(logprobs), per_token))
        self.turn_open = True

    @property
    def num_routed_positions(self) -> int:
        return 0 if self.routes is None else int(self.routes.shape[0])

    def append_routes(self, chunk: torch.Tensor | None) -> None:
        """Add the engine's routes for positions [num_routed_positions, ...), as asked for with
        routed_experts_start_len=num_routed_positions."""
        if chunk is None or chunk.numel() == 0:
            return
        if self.routes is not None and chunk.shape[1] != self.routes.shape[1]:
            raise ValueError(
                f"routes of width {chunk.shape[1]} appended to routes of width "
                f"{self.routes.shape[1]} (layers*top_k changed within one trajectory)"
            )
        self.routes = chunk if self.routes is None else torch.cat([self.routes, chunk])

    def close_turn(self) -> None:
        """The current model turn is finished; the next model tokens start a new segment."""
        self.turn_open = False

    def append_env(self, token_ids: list[int]) -> None:
        self.close_turn()
        if token_ids:
            self.segments.append(Segment("env", list(token_ids)))

    # -- views --------------------------------------------------------------------------------
    @property
    def token_ids(self) -> list[int]:
        """Prompt plus every segment: the exact sequence the engine continues from."""
        ids = list(self.prompt_ids)
        for seg in self.segments:
            ids.extend(seg.token_ids)
        return ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + sum(len(s.token_ids) for s in self.segments)

    @property
    def num_model_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.kind == "model")

    @property
    def versions(self) -> list[int]:
        return [v for s in self.segments if s.kind == "model" for v in s.versions]  # type: ignore[union-attr]

    @property
    def min_version(self) -> int | None:
        vs = self.versions
        return min(vs) if vs else None

    @property
    def trainable(self) -> bool:
        return self.status in (Status.COMPLETE, Status.TRUNCATED) and self.reward is not None


@dataclass(frozen=True, slots=True)
class FlatBatch:
    """Padded learner view of a list of trajectories (right padding)."""

    input_ids_BT: torch.Tensor  # long
    attention_mask_BT: torch.Tensor  # long, 1 on real tokens
    loss_mask_BT: torch.Tensor  # float, 1 on model-sampled tokens
    old_logprobs_BT: torch.Tensor  # float, engine log-probs on model tokens, 0 elsewhere
    advantages_BT: torch.Tensor  # float, per-token advantage (constant within a sequence for GSPO)
    versions_BT: torch.Tensor  # long, weight version per model token, -1 elsewhere
    # Per row, the engine's routed experts [positions, layers*top_k] (Trajectory.routes), or None
    # for a row without them; None for the whole batch when no row has any.
    engine_routes: list[torch.Tensor | None] | None = None

    @property
    def num_sequences(self) -> int:
        return int(self.input_ids_BT.shape[0])

    def select(self, rows: slice | list[int] | torch.Tensor) -> FlatBatch:
        """Rows of the batch, trimmed to the longest remaining sequence."""
        parts = [t[rows] for t in self._tensors()]
        length = int(parts[1].sum(dim=1).max().item()) if parts[1].numel() else 0
        routes = None
        if self.engine_routes is not None:
            index = torch.arange(self.num_sequences)[rows].reshape(-1).tolist()
            routes = [self.engine_routes[i] for i in index]
        trimmed = FlatBatch(*[p[:, :length] for p in parts])
        return trimmed if routes is None else dataclasses.replace(trimmed, engine_routes=routes)

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return (
            self.input_ids_BT,
            self.attention_mask_BT,
            self.loss_mask_BT,
            self.old_logprobs_BT,
            self.advantages_BT,
            self.versions_BT,
        )


def flatten(
    trajectories: list[Trajectory],
    advantages: list[float] | list[list[float]],
    pad_id: int,
) -> FlatBatch:
    """Pad trajectories into [B, T] tensors.

    `advantages[i]` is either one float for trajectory i (spread over its model tokens) or a list
    with one float per model segment of trajectory i (per-turn advantages for GSPO-token).
    """
    if len(advantages) != len(trajectories):
        raise ValueError(f"{len(trajectories)} trajectories but {len(advantages)} advantages")
    if not trajectories:
        raise ValueError("cannot flatten an empty list of trajectories")
    T = max(t.num_tokens for t in trajectories)
    B = len(trajectories)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T), dtype=torch.float32)
    old_lp = torch.zeros((B, T), dtype=torch.float32)
    adv = torch.zeros((B, T), dtype=torch.float32)
    versions = torch.full((B, T), -1, dtype=torch.long)
    for b, (traj, a) in enumerate(zip(trajectories, advantages)):
        _fill_row(traj, a, b, input_ids, attention, loss_mask, old_lp, adv, versions)
    routes = [t.routes for t in trajectories]
    engine_routes = routes if any(r is not None for r in routes) else None
    return FlatBatch(input_ids, attention, loss_mask, old_lp, adv, versions, engine_routes)


def _fill_row(traj, adv_spec, b, input_ids, attention, loss_mask, old_lp, adv, versions) -> None:
    model_segments = [s for s in traj.segments if s.kind == "model"]
    if isinstance(adv_spec, (list, tuple)):
        if len(adv_spec) != len(model_segments):
            raise ValueError(
                f"trajectory {traj.uid}: {len(model_segments)} model turns "
                f"but {len(adv_spec)} per-turn advantages"
            )
        per_turn = [float(x) for x in adv_spec]
    else:
        per_turn = [float(adv_spec)] * len(model_segments)
    pos = len(traj.prompt_ids)
    input_ids[b, :pos] = torch.tensor(traj.prompt_ids, dtype=torch.long)
    turn = 0
    for seg in traj.segments:
        n = len(seg.token_ids)
        input_ids[b, pos : pos + n] = torch.tensor(seg.token_ids, dtype=torch.long)
        if seg.kind == "model":
            loss_mask[b, pos : pos + n] = 1.0
            old_lp[b, pos : pos + n] = torch.tensor(seg.logprobs, dtype=torch.float32)
            versions[b, pos : pos + n] = torch.tensor(seg.versions, dtype=torch.long)
            adv[b, pos : pos + n] = per_turn[turn]
            turn += 1
        pos += n
    attention[b, :pos] = 1
