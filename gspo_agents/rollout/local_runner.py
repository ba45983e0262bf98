"""LocalEngine's model side: the weights in use, forwards of the running batch, sampling.

- `ModelRunner`: the state bound to one set of weights (the model, its fused Qwen3 forward, the
  cache keyword its forward takes, the router hooks when routes are returned), the prefill of
  newly admitted requests and one decode step of the running batch; `swap` replaces the weights.
- `sample_step`: every row's next token and log-prob, appended to its request; which rows are done.
- `check_same_vocab`, `check_named_tensors`, `model_with_tensors`: the checks and the copy that
  make a weight update's new model.

It runs on the worker thread (the builders also off the event loop) and takes no lock: what
runs when, pauses, the timing of a swap and answering callers are local_engine.py's.

Shape legend: B rows in the running batch, U unique prompts of a prefill, L cache length,
V vocabulary.
"""

from __future__ import annotations

import copy
import inspect
from contextlib import nullcontext

import torch

from gspo_agents.rollout.engine import EngineRequestError
from gspo_agents.rollout.local_batch import Batch
from gspo_agents.rollout.local_forward import Qwen3Forward
from gspo_agents.rollout.local_request import Request
from gspo_agents.rollout.local_routes import EngineRoutes
from gspo_agents.rollout.local_sampling import sample_rows


class ModelRunner:
    """The engine's current weights and the forwards run with them (worker thread only)."""

    def __init__(
        self, model: torch.nn.Module, fast_forward: Qwen3Forward | None, return_routes: bool
    ) -> None:
        self.model = model
        self.cache_kwarg = detect_cache_kwarg(model)
        self.fast_forward = fast_forward
        self.routes = EngineRoutes(model) if return_routes else None

    def swap(self, model: torch.nn.Module, fast_forward: Qwen3Forward | None) -> None:
        """Use `model` from the next forward on; its router hooks replace the old model's."""
        self.model = model
        self.cache_kwarg = detect_cache_kwarg(model)
        self.fast_forward = fast_forward
        if self.routes is not None:
            self.routes.close()
            self.routes = EngineRoutes(model)

    def prefill(self, requests: list[Request]) -> tuple[Batch, torch.Tensor, int]:
        """A batch of the admitted requests with their prompts in its cache, the logits of each
        row's next token [B, V] and how many prompts were forwarded (identical ones once)."""
        new, prefill = Batch.for_prefill(requests, self.model.config)
        with self._recording(requests) as routes:
            logits_BV = self.forward(
                prefill.ids_UL, prefill.mask_UL, prefill.positions_UL, new.cache
            )
        if routes:
            EngineRoutes.keep_prefill(requests, prefill, routes[0])
        if prefill.row_of_B is not None:
            new.expand(prefill.row_of_B)
            logits_BV = logits_BV[prefill.row_of_B]
        return new, logits_BV, len(prefill.ids_UL)

    def decode(self, batch: Batch) -> torch.Tensor:
        """Forward each row's last sampled token; the logits of its next one [B, V]."""
        mask_BL = batch.open_column()
        with self._recording(batch.rows) as routes:
            logits_BV = self.forward(
                batch.next_tok_B[:, None], mask_BL, batch.next_pos_B[:, None], batch.cache
            )
        if routes:
            EngineRoutes.keep_decode(batch.rows, routes[0])
        batch.next_pos_B = batch.next_pos_B + 1
        return logits_BV

    def forward(self, input_ids, mask_BL, positions, cache):
        if self.fast_forward is not None:
            return self.fast_forward(input_ids, mask_BL, positions, cache)
        kwargs = {self.cache_kwarg: cache}
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask_BL,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        return out.logits[:, -1]

    def _recording(self, rows: list[Request]):
        return self.routes.forward(rows) if self.routes is not None else nullcontext([])


def sample_step(batch: Batch, logits_BV: torch.Tensor) -> tuple[list[int], list[int | None]]:
    """Sample every row, append the token and its log-prob to the row's request; returns the
    rows that finished (ascending) and the stop token each matched (None: max_new_tokens)."""
    filtered = (batch.top_k_B, batch.top_p_B) if batch.filtered else (None, None)
    token_B, logprob_B = sample_rows(
        logits_BV, batch.temp_B, batch.seed_B, batch.count_B, *filtered
    )
    batch.next_tok_B, batch.count_B = token_B, batch.count_B + 1
    done: list[int] = []
    matched: list[int | None] = []
    for i, request, token, logprob in zip(
        range(len(batch)), batch.rows, token_B.tolist(), logprob_B.tolist(), strict=True
    ):
        request.tokens.append(token)
        request.logprobs.append(logprob)
        if token in request.stop_ids:
            done.append(i)
            matched.append(token)
        elif len(request.tokens) >= request.sampling.max_new_tokens:
            done.append(i)
            matched.append(None)
    return done, matched


def check_same_vocab(new: torch.nn.Module, current: torch.nn.Module, path: str) -> None:
    if new.config.vocab_size != current.config.vocab_size:
        raise EngineRequestError(
            f"checkpoint {path!r} has vocab_size {new.config.vocab_size}, the engine's model "
            f"has {current.config.vocab_size}: update_weights needs the same architecture"
        )


def check_named_tensors(model: torch.nn.Module, named_tensors: dict[str, torch.Tensor]) -> None:
    """Every name is one of the model's state_dict, with that parameter's shape."""
    own = model.state_dict()
    unknown = sorted(set(named_tensors) - set(own))
    if unknown:
        raise EngineRequestError(
            f"unknown parameter names {unknown[:5]} (of {len(unknown)}); send the names of "
            "the model's state_dict"
        )
    for name, tensor in named_tensors.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise EngineRequestError(
                f"{name}: shape {tuple(tensor.shape)} != model's {tuple(own[name].shape)}"
            )


def model_with_tensors(
    model: torch.nn.Module, named_tensors: dict[str, torch.Tensor]
) -> torch.nn.Module:
    """A copy of `model` with the named parameters replaced (the rest as they are)."""
    new = copy.deepcopy(model)
    new.load_state_dict(named_tensors, strict=False)
    return new


def detect_cache_kwarg(model) -> str:
    # transformers 5.x renamed `past_key_values` to `cache`; accept either.
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def eos_of(model) -> frozenset[int]:
    eos = model.config.eos_token_id
    if eos is None:
        return frozenset()
    return frozenset(eos if isinstance(eos, list) else [eos])
