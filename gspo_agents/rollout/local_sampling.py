"""LocalEngine's sampler: every row of a decode step sampled at once, each from its own seed.

Reproducibility without a generator per request: a row's uniform for the token at generated
position t is a pure function of (row seed, t) — a splitmix64 counter-based hash in int64 torch
ops — so the same seed gives the same token whatever else is in the batch, in whatever order, and
a whole step needs no Python loop over rows. The token is drawn by inverse CDF over the row's
(filtered) probabilities: the first token whose cumulative probability exceeds u * total, which is
an exact draw from those probabilities (zero-probability tokens are never chosen).

The reported log-prob is log_softmax(logits / T) of the sampled token, before top-k / top-p
filtering (`rollout.engine` semantics). This module knows nothing of requests or caches.

Shape legend: B rows, V vocabulary.
"""

from __future__ import annotations

import torch

_TWO64 = 1 << 64
# splitmix64 constants as signed int64 (torch int64 arithmetic wraps like uint64 would).
_GOLDEN = 0x9E3779B97F4A7C15 - _TWO64
_MIX1 = 0xBF58476D1CE4E5B9 - _TWO64
_MIX2 = 0x94D049BB133111EB - _TWO64
SEED_BITS = 62  # seeds are drawn and accepted in [0, 2**62); larger ones are folded in


def _shr(x_B: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic: it copies the sign bit)."""
    return (x_B >> bits) & ((1 << (64 - bits)) - 1)


def _mix64(z_B: torch.Tensor) -> torch.Tensor:
    z_B = (z_B ^ _shr(z_B, 30)) * _MIX1
    z_B = (z_B ^ _shr(z_B, 27)) * _MIX2
    return z_B ^ _shr(z_B, 31)


def counter_uniforms(seed_B: torch.Tensor, position_B: torch.Tensor) -> torch.Tensor:
    """float64 uniforms in [0, 1): splitmix64 output number `position` of the stream `seed`."""
    z_B = _mix64(seed_B.long()) + (position_B.long() + 1) * _GOLDEN
    return _shr(_mix64(z_B), 11).double() * (2.0**-53)


def fold_seed(seed: int) -> int:
    """Any Python int as an int64-safe seed (SamplingParams.seed may be any size)."""
    return seed % (1 << SEED_BITS)


def filter_top_k_top_p(
    scaled_BV: torch.Tensor, top_k_B: torch.Tensor, top_p_B: torch.Tensor
) -> torch.Tensor:
    """-inf outside each row's support (see `outside_support`)."""
    return scaled_BV.masked_fill(outside_support(scaled_BV, top_k_B, top_p_B), float("-inf"))


def outside_support(
    scaled_BV: torch.Tensor, top_k_B: torch.Tensor, top_p_B: torch.Tensor
) -> torch.Tensor:
    """True outside each row's support: top-k (ties with the k-th value kept), then top-p over
    the top-k renormalised probabilities, keeping the token that crosses top_p. A row with
    top_k <= 0 (or >= V) and top_p >= 1 keeps every token."""
    vocab = scaled_BV.shape[-1]
    sorted_BV, order_BV = torch.sort(scaled_BV, dim=-1, descending=True)
    k_B = torch.where((top_k_B > 0) & (top_k_B < vocab), top_k_B, vocab)
    kth_B1 = sorted_BV.gather(1, (k_B - 1)[:, None])
    drop_BV = sorted_BV < kth_B1
    probs_BV = torch.softmax(sorted_BV.masked_fill(drop_BV, float("-inf")), dim=-1)
    over_BV = probs_BV.cumsum(-1) - probs_BV > top_p_B[:, None]
    drop_BV |= over_BV & (top_p_B < 1.0)[:, None]  # rounding never trims a top_p=1 row
    return torch.zeros_like(drop_BV).scatter(1, order_BV, drop_BV)


def sample_rows(
    logits_BV: torch.Tensor,
    temperature_B: torch.Tensor,
    seed_B: torch.Tensor,
    position_B: torch.Tensor,
    top_k_B: torch.Tensor | None = None,
    top_p_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its log-prob. `top_k_B` / `top_p_B` None: full support (faster)."""
    scaled_BV = logits_BV.float() / temperature_B[:, None]
    logprobs_BV = torch.log_softmax(scaled_BV, dim=-1)
    # Unnormalised is fine (u is scaled by each row's total), and a full-support row gets the
    # very same numbers whether or not other rows in its batch filter: batch-independent draws.
    probs_BV = logprobs_BV.exp()
    if top_k_B is not None or top_p_B is not None:
        rows = scaled_BV.shape[0]
        top_k_B = top_k_B if top_k_B is not None else torch.full((rows,), -1)
        top_p_B = top_p_B if top_p_B is not None else torch.ones(rows)
        probs_BV = probs_BV.masked_fill(outside_support(scaled_BV, top_k_B, top_p_B), 0.0)
    cdf_BV = probs_BV.double().cumsum(-1)  # float64: the running sum stays exact enough
    target_B1 = (counter_uniforms(seed_B, position_B) * cdf_BV[:, -1])[:, None]
    token_B = torch.searchsorted(cdf_BV, target_B1, right=True).squeeze(1)
    vocab = logits_BV.shape[-1]
    if bool((token_B >= vocab).any()):  # u * total rounded up to total: the last allowed token
        last_B = vocab - 1 - (probs_BV > 0).flip(-1).long().argmax(-1)
        token_B = torch.where(token_B >= vocab, last_B, token_B)
    return token_B, logprobs_BV.gather(1, token_B[:, None]).squeeze(1)
