"""A LocalEngine request while the engine holds it, and how its answer crosses threads.

The worker thread resolves a caller's future only through `post` (loop.call_soon_threadsafe),
never directly: asyncio futures are not thread-safe.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import torch

from gspo_agents.rollout.engine import FinishReason, Generation, SamplingParams


@dataclass(slots=True, eq=False)
class Request:
    """One generate() call while the engine holds it (fields from `tokens` on are the worker's)."""

    rid: str
    prompt: list[int]
    sampling: SamplingParams
    stop_ids: frozenset[int]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    seed: int  # the counter-based sampler's stream (SamplingParams.seed, or drawn at submit)
    submitted_at: float
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    aborted: bool = False  # set by any thread under the engine lock; read by the worker
    version: int = 0  # the weight version its next token comes from
    # (old version, tokens made by then) per weight update it was kept through (in_place /
    # retract pauses), as SGLang 0.5.23's WeightVersionEvent (srt/utils/weight_versions.py)
    version_events: list[tuple[int, int]] = field(default_factory=list)
    # routed experts (MoE): None = not asked; else SGLang's routed_experts_start_len, and one
    # [positions, layers*top_k] chunk per forward that took this request's tokens (local_routes)
    routes_start: int | None = None
    routes: list[torch.Tensor] = field(default_factory=list)

    def generation(
        self, reason: FinishReason, matched: int | None, engine_version: int
    ) -> Generation:
        return Generation(
            token_ids=self.tokens,
            logprobs=self.logprobs,
            finish_reason=reason,
            weight_version=self.version if self.tokens else engine_version,
            token_versions=self.token_versions(),
            routed_experts=self.answer_routes(),
            meta={
                "prompt_tokens": len(self.prompt),
                "completion_tokens": len(self.tokens),
                "cached_tokens": 0,
                "matched": matched,
                "e2e_latency": time.perf_counter() - self.submitted_at,
            },
        )

    def answer_routes(self) -> torch.Tensor | None:
        """[positions, layers*k] for positions [routes_start, prompt + output - 1), or None."""
        if self.routes_start is None or not self.routes:
            return None
        return torch.cat(self.routes)[self.routes_start :].contiguous()

    def token_versions(self) -> list[int] | None:
        """One version per token when an update happened while it ran; else None."""
        if not self.version_events:
            return None
        out: list[int] = []
        for old, made in self.version_events:
            out += [old] * (made - len(out))  # nothing when no token came between two updates
        return out + [self.version] * (len(self.tokens) - len(out))


def finish_reason(request: Request, matched: int | None) -> FinishReason:
    if matched is not None:
        return "stop"
    if len(request.tokens) >= request.sampling.max_new_tokens:
        return "length"
    assert request.aborted, "a row retires only when stopped, at its length, or aborted"
    return "abort"


def post(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the caller's event loop is closed: nobody is waiting any more
        pass


def resolve(future: asyncio.Future, generation: Generation) -> None:
    if not future.done():  # a cancelled caller has already gone
        future.set_result(generation)


def resolve_all(pairs: list[tuple[asyncio.Future, Generation]]) -> None:
    for future, generation in pairs:
        resolve(future, generation)


def fail(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
