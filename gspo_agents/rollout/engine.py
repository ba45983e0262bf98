"""The engine protocol every inference backend implements (LocalEngine, SGLangEngine).

Token in, token out: an engine continues a list of token ids and returns the sampled ids with the
engine's own log-probs, log_softmax(logits / temperature) of each sampled token, before any top-k /
top-p renormalisation (SGLang's semantics), plus the weight version that produced them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

FinishReason = Literal["stop", "length", "abort"]
PauseMode = Literal["abort", "in_place", "retract"]
PAUSE_MODES: tuple[PauseMode, ...] = ("abort", "in_place", "retract")


def check_pause_mode(mode: str) -> PauseMode:
    """`mode` if it is one of SGLang's /pause_generation modes, else a ValueError naming them."""
    if mode not in PAUSE_MODES:
        raise ValueError(
            f"pause_mode={mode!r} is not one of {list(PAUSE_MODES)} (SGLang's /pause_generation "
            "modes; set engine.pause_mode)"
        )
    return mode


class EngineError(Exception):
    """Base of engine failures (connection, timeout, server error). Retryable unless stated."""


class EngineUnavailable(EngineError):
    """No worker answered (refused connection, dead process, health check failing)."""


class EngineTimeout(EngineError):
    """A request or control call exceeded its deadline."""


class EngineRequestError(EngineError):
    """The engine rejected the request (HTTP 4xx): a bug or bad input, not retryable."""


class TokenHistory(list):
    """An episode's token ids (prompt first) as the manager sends them each turn: a list that
    only grows. Appending (`append`, `extend`, `+=`) is all it allows, so an engine that saw
    its first n ids may trust them unchanged when the same object comes back longer, without
    comparing them (sglang_body.py: the per-turn body then costs the new ids, not the history).
    Any other edit raises; copy it (`list(h)`) to edit. Engines read it as a plain list."""

    __slots__ = ()

    def _grows_only(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a TokenHistory only grows (append / extend): copy it to edit it")

    __setitem__ = __delitem__ = __imul__ = _grows_only  # type: ignore[assignment]
    insert = pop = remove = clear = sort = reverse = _grows_only


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 = full vocabulary
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 for RL sampling (got {self.temperature}); "
                "log-probs are log_softmax(logits / temperature)"
            )

    @property
    def full_support(self) -> bool:
        return self.top_p >= 1.0 and self.top_k in (-1, 0)


@dataclass(frozen=True, slots=True)
class Generation:
    token_ids: list[int]
    logprobs: list[float]  # one per token in token_ids
    finish_reason: FinishReason
    weight_version: int  # the version of the last token
    meta: dict = field(default_factory=dict)  # engine-specific extras (latency, cached tokens)
    # One version per token when they differ (a request an in_place / retract pause kept across
    # a weight update); None: every token is at weight_version.
    token_versions: list[int] | None = None
    # MoE routed experts when asked (`routed_experts_start_len`): int32 [positions,
    # layers*top_k] for positions [start, prompt + output - 1), SGLang's `routed_experts`.
    routed_experts: torch.Tensor | None = None

    def versions(self) -> list[int]:
        """The weight version of every token."""
        if self.token_versions is not None:
            return list(self.token_versions)
        return [self.weight_version] * len(self.token_ids)


@runtime_checkable
class Engine(Protocol):
    """What the rollout manager needs from an inference backend."""

    @property
    def weight_version(self) -> int: ...

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        request_id: str,
        *,
        route_key: str | None = None,
    ) -> Generation:
        """Continue `input_ids`. An aborted request returns the tokens made so far with
        finish_reason 'abort' (it does not raise). `route_key` names the trajectory: an engine
        with several workers keeps every request of one key on one worker (its prefix cache)."""
        ...

    async def abort(self, request_id: str | None = None) -> None:
        """Abort one request, or every in-flight request when request_id is None."""
        ...

    @property
    def pause_mode(self) -> PauseMode:
        """How the trainer's pause around a weight update treats in-flight generations
        (`engine.pause_mode`): the mode the RolloutManager passes to pause()."""
        ...

    async def pause(self, mode: PauseMode = "abort") -> None:
        """Hold new generations until resume(). In-flight ones, by SGLang's /pause_generation
        modes: "abort" ends them (they return 'abort' with their tokens so far); "in_place" and
        "retract" keep them, and they continue after resume() under the weights loaded
        meanwhile, answering with per-token versions (Generation.token_versions)."""
        ...

    async def resume(self) -> None: ...

    async def update_weights(self, path: str, version: int) -> None:
        """Load HF-format weights from `path` and tag every later token with `version`."""
        ...

    async def health(self) -> bool: ...

    async def close(self) -> None: ...
