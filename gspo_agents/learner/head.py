"""The learner's forward: the model body, then token log-probs and entropies from hidden states.

`TokenHead(model, ...)(input_ids=..., ...)` runs an HF causal LM with `logits_to_keep` set to no
position (its own output layer computes nothing) and, inside the model's forward, turns the last
hidden states into `TokenStats` with `hidden_token_stats`: the output layer applied a chunk of
tokens at a time, recomputed in backward. Inside the forward because under FSDP2 the output
layer's weight is a sharded DTensor outside it; there, the root module's pre-forward has gathered
it, and its gradient flows back into the gathered parameter that FSDP reduce-scatters.

`chunk_tokens=0`, or a model whose output layer is not a plain linear map with an optional scale
(Gemma-2's logit soft-capping), takes the full-logits path: `token_logprobs` of `model(...).logits`.

Shape legend: B rows, T positions, H hidden size.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from gspo_agents.logprobs import (
    TokenStats,
    hidden_token_stats,
    token_entropy,
    token_logprobs,
)

log = logging.getLogger(__name__)


class TokenHead:
    """Token log-probs (engine temperature) and entropies of a causal LM's forward."""

    def __init__(
        self, model: nn.Module, temperature: float, chunk_tokens: int, entropy_grad: bool = False
    ) -> None:
        self.model = model
        self.temperature = temperature
        # the full-logits path computes entropy without gradient (a metric, one chunk of
        # positions at a time) unless a loss term needs it; the chunked path always has it
        self.entropy_grad = entropy_grad
        self.scale = _logit_scale(model.config)
        why = _unsupported(model) if chunk_tokens > 0 else None
        if why:
            log.warning("log-probs from full logits (no chunked output layer): %s", why)
        self.chunk_tokens = 0 if why else chunk_tokens

    @property
    def chunked(self) -> bool:
        return self.chunk_tokens > 0

    def __call__(self, input_ids: torch.Tensor, **model_kwargs) -> TokenStats:
        """Stats of `input_ids` under one forward; kwargs go to the model (masks, position ids)."""
        if not self.chunked:
            out = self.model(input_ids=input_ids, use_cache=False, **model_kwargs)
            return self.from_logits(out.logits, input_ids)
        box: list[TokenStats] = []

        def hook(module, args, output) -> None:
            box.append(self.stats(_last_hidden(output), input_ids))

        handle = self.model.get_decoder().register_forward_hook(hook)
        none = _NONE.to(input_ids.device)
        try:
            self.model(input_ids=input_ids, use_cache=False, logits_to_keep=none, **model_kwargs)
        finally:
            handle.remove()
        if len(box) != 1:
            raise RuntimeError(
                f"{type(self.model).__name__}: expected one forward of its decoder "
                f"(get_decoder()), saw {len(box)}; set trainer.logprob_chunk_tokens=0"
            )
        return box[0]

    @contextmanager
    def hidden(self) -> Iterator[list[torch.Tensor]]:
        """Collects the last hidden states of each forward inside, for `stats` (single process
        only: outside a forward, FSDP2 holds the output layer sharded). Pass `forward_kwargs()`."""
        box: list[torch.Tensor] = []
        handle = self.model.get_decoder().register_forward_hook(
            lambda module, args, output: box.append(_last_hidden(output))
        )
        try:
            yield box
        finally:
            handle.remove()

    def forward_kwargs(self, device: torch.device) -> dict:
        return {"logits_to_keep": _NONE.to(device)} if self.chunked else {}

    def stats(self, hidden_BTH: torch.Tensor, input_ids_BT: torch.Tensor) -> TokenStats:
        """Stats of tokens given the hidden states before the output layer (see TokenStats)."""
        head = self.model.get_output_embeddings()
        return hidden_token_stats(
            hidden_BTH,
            head.weight,
            input_ids_BT,
            self.temperature,
            self.chunk_tokens,
            bias_V=getattr(head, "bias", None),
            scale=self.scale,
        )

    def from_logits(self, logits_BTV: torch.Tensor, input_ids: torch.Tensor) -> TokenStats:
        """Stats from full logits (the model's forward has applied any logit scale itself)."""
        lp_BT = token_logprobs(logits_BTV, input_ids, self.temperature)
        if self.entropy_grad:
            return TokenStats(lp_BT, token_entropy(logits_BTV, self.temperature))
        with torch.no_grad():
            step = max(1, _ENTROPY_CHUNK // logits_BTV.shape[0])
            parts = [
                token_entropy(logits_BTV[:, max(0, s - 1) : s + step], self.temperature)
                for s in range(0, logits_BTV.shape[1], step)
            ]
        return TokenStats(
            lp_BT, torch.cat([p if i == 0 else p[:, 1:] for i, p in enumerate(parts)], 1)
        )


_ENTROPY_CHUNK = 1024  # positions per no-grad entropy chunk of the full-logits path
# `logits_to_keep` as an empty position index: the model's own output layer maps no position.
_NONE = torch.empty(0, dtype=torch.long)


def _last_hidden(output) -> torch.Tensor:
    hidden = getattr(output, "last_hidden_state", None)
    return hidden if hidden is not None else output[0]


def _logit_scale(config) -> float:
    """The factor some HF models apply to the output layer's logits (Cohere, Granite)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    scale = getattr(text, "logit_scale", None)
    if scale is not None:
        return float(scale)
    divisor = getattr(text, "logits_scaling", None)
    return 1.0 / float(divisor) if divisor else 1.0


def _unsupported(model: nn.Module) -> str | None:
    """Why the chunked head cannot reproduce this model's logits, or None when it can."""
    if hasattr(model, "peft_config"):  # a LoRA wrapper passes the keyword on to its base
        model = model.get_base_model()
    config = model.config.get_text_config()
    if getattr(config, "final_logit_softcapping", None):
        return f"{type(model).__name__} soft-caps its logits"
    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        return f"{type(model).__name__}.forward takes no logits_to_keep"
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        return f"the output layer of {type(model).__name__} is not an nn.Linear"
    if not hasattr(model, "get_decoder"):
        return f"{type(model).__name__} has no get_decoder()"
    return None
