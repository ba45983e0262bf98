"""Per-token log-probs (and entropies) with the engine's semantics, shared by engine and learner.

The engine reports log_softmax(logits / temperature) of each sampled token (SGLang's semantics,
before top-k / top-p renormalisation). The learner must compute exactly the same quantity, or the
importance ratio measures the temperature instead of the policy change.

Two ways to the same numbers:
- `token_logprobs(logits)`: from full logits, [B, T, V] (the engine, small models, tests).
- `hidden_token_stats(hidden, weight)`: from the last hidden states, applying the output layer a
  chunk of tokens at a time in forward and again in backward, so no [T, V] tensor lives longer
  than one chunk. Its per-token entropy carries a gradient (an entropy bonus can use it).

Shape legend: B batch, T sequence length, V vocabulary, H hidden size, N = B x T positions.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.nn import functional as F


class TokenStats(NamedTuple):
    """Aligned to token positions; position 0 (no context) holds 0 in both."""

    logprobs_BT: torch.Tensor  # log p(token t | tokens < t) at the engine temperature, fp32
    entropy_BT: torch.Tensor  # entropy (nats) of the distribution token t was sampled from, fp32


def token_logprobs(
    logits_BTV: torch.Tensor, input_ids_BT: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Log-prob of each token given the tokens before it, aligned to token positions.

    Returns [B, T] in fp32; position 0 (no context) is 0. `logits_BTV[:, t]` predicts token t+1.
    """
    _check_temperature(temperature)
    logits = logits_BTV[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids_BT[:, 1:].unsqueeze(-1)
    # log_softmax(x)[y] = x[y] - logsumexp(x): avoids materialising a second [B, T, V] tensor.
    picked = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return F.pad(picked, (1, 0), value=0.0)


def token_entropy(logits_BTV: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) that token t was drawn from; [B, T], 0 at t=0."""
    _check_temperature(temperature)
    logp = torch.log_softmax(logits_BTV[:, :-1].float() / temperature, dim=-1)
    return F.pad(-(logp.exp() * logp).sum(-1), (1, 0), value=0.0)


def hidden_token_stats(
    hidden_BTH: torch.Tensor,
    weight_VH: torch.Tensor,
    input_ids_BT: torch.Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    bias_V: torch.Tensor | None = None,
    scale: float = 1.0,
) -> TokenStats:
    """Token log-probs and entropies of `logits = (hidden @ weight.T + bias) * scale`, chunked.

    Equal to `token_logprobs` / `token_entropy` of those logits up to float rounding, gradients
    included (to hidden, weight and bias). The matmul runs in the autocast dtype when autocast is
    on, as the output layer would, everything after it in fp32.
    """
    _check_temperature(temperature)
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be > 0, got {chunk_tokens}")
    B, T, H = hidden_BTH.shape
    device = hidden_BTH.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
    else:
        dtype = torch.promote_types(hidden_BTH.dtype, weight_VH.dtype)
    # hidden t predicts token t+1; the last position's target is a placeholder, dropped below
    targets_N = torch.roll(input_ids_BT, -1, dims=1).reshape(-1)
    lp_N, ent_N = _ChunkedHead.apply(
        hidden_BTH.reshape(B * T, H),
        weight_VH,
        bias_V,
        targets_N,
        _Spec(float(temperature), float(scale), int(chunk_tokens), dtype),
    )
    shift = lambda x_N: F.pad(x_N.reshape(B, T)[:, :-1], (1, 0), value=0.0)  # noqa: E731
    return TokenStats(shift(lp_N), shift(ent_N))


class _Spec(NamedTuple):
    temperature: float
    scale: float
    chunk: int
    dtype: torch.dtype  # the output layer's matmul dtype


def _logits(h_cH, w_VH, b_V, spec: _Spec) -> torch.Tensor:
    """fp32 logits / temperature of one chunk, rounded as the output layer rounds them."""
    out = F.linear(h_cH.to(spec.dtype), w_VH, b_V)
    if spec.scale != 1.0:
        out = out * spec.scale
    z = out.float()
    return z.div_(spec.temperature) if spec.temperature != 1.0 else z


class _ChunkedHead(torch.autograd.Function):
    """(log-prob of the target, entropy) per position; backward recomputes each chunk's logits."""

    @staticmethod
    def forward(ctx, hidden_NH, weight_VH, bias_V, targets_N, spec: _Spec):
        N = hidden_NH.shape[0]
        lp_N = hidden_NH.new_empty(N, dtype=torch.float32)
        ent_N, logz_N = torch.empty_like(lp_N), torch.empty_like(lp_N)
        w, b = _cast(weight_VH, spec.dtype), _cast(bias_V, spec.dtype)
        with torch.autocast(hidden_NH.device.type, enabled=False):
            for s in range(0, N, spec.chunk):
                e = min(N, s + spec.chunk)
                z = _logits(hidden_NH[s:e], w, b, spec)
                logz = torch.logsumexp(z, dim=-1)
                lp_N[s:e] = z.gather(1, targets_N[s:e, None]).squeeze(1) - logz
                logp = z.sub_(logz[:, None])
                ent_N[s:e] = -(logp.exp().mul_(logp)).sum(-1)
                logz_N[s:e] = logz
                del z, logp  # before the next chunk's logits exist: one chunk at a time
        ctx.save_for_backward(hidden_NH, weight_VH, bias_V, targets_N, logz_N, ent_N)
        ctx.spec = spec
        return lp_N, ent_N

    @staticmethod
    def backward(ctx, g_lp_N, g_ent_N):
        hidden_NH, weight_VH, bias_V, targets_N, logz_N, ent_N = ctx.saved_tensors
        spec: _Spec = ctx.spec
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        w, b = _cast(weight_VH, spec.dtype), _cast(bias_V, spec.dtype)
        grad_h = torch.empty_like(hidden_NH) if need_h else None
        grad_w = torch.zeros(weight_VH.shape, dtype=torch.float32, device=weight_VH.device)
        grad_b = torch.zeros(weight_VH.shape[0], dtype=torch.float32, device=weight_VH.device)
        with torch.autocast(hidden_NH.device.type, enabled=False):
            for s in range(0, hidden_NH.shape[0], spec.chunk):
                e = min(hidden_NH.shape[0], s + spec.chunk)
                g_lp, g_ent = g_lp_N[s:e, None], g_ent_N[s:e, None]
                logp = _logits(hidden_NH[s:e], w, b, spec).sub_(logz_N[s:e, None])
                p = logp.exp()
                # d lp / dz = onehot - p;  d H / dz = -p (log p + H)
                g_z = logp.add_(ent_N[s:e, None]).mul_(g_ent).add_(g_lp).mul_(p).neg_()
                del p
                g_z.scatter_add_(1, targets_N[s:e, None], g_lp)
                if spec.temperature != 1.0:
                    g_z.div_(spec.temperature)
                g_out = g_z.to(spec.dtype)
                del g_z
                if spec.scale != 1.0:
                    g_out = g_out * spec.scale
                h = hidden_NH[s:e].to(spec.dtype)
                if need_h:
                    grad_h[s:e] = g_out @ w
                if need_w:
                    grad_w += g_out.t() @ h
                if need_b:
                    grad_b += g_out.float().sum(0)
                del logp, g_out  # (g_out may be logp itself, in fp32)
        return (
            grad_h,
            grad_w.to(weight_VH.dtype) if need_w else None,
            grad_b.to(bias_V.dtype) if need_b else None,
            None,
            None,
        )


def _cast(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.to(dtype)


def _check_temperature(temperature: float) -> None:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
