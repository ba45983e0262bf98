"""LocalEngine's forward for the Qwen3 dense family: the same math as transformers' Qwen3 with
SDPA, in one function over the model's own weights.

Why: on a CPU the engine's decode steps are small (B rows x 1 token), and the transformers
forward spends most of such a step in per-module Python and in unfused elementwise ops (RMSNorm
as eight ops, rotary as fourteen, a 4-D mask rebuilt every step). Here RMSNorm is torch's fused
`rms_norm`, q/k/v and gate/up are one matmul each (weights concatenated once per weight version),
and the mask is built directly. Results equal the transformers forward to float rounding (a test
compares logits on a padded batch, prefill and decode); the learner keeps using transformers.

What it is not: a general model runner. `for_model` returns None for anything but a plain
`Qwen3ForCausalLM` (no attention bias, SiLU MLP, full attention in every layer, SDPA), and the
engine then runs the transformers forward. Rotary embeddings come from the model's own rotary
module, so every RoPE variant transformers implements is honoured.

Shape legend: B rows, T new tokens, L cache length (incl. padding), H hidden, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True, slots=True)
class _Layer:
    in_norm: torch.Tensor
    qkv_weight: torch.Tensor  # [q; k; v] rows
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o_weight: torch.Tensor
    post_norm: torch.Tensor
    gate_up_weight: torch.Tensor  # [gate; up] rows
    down_weight: torch.Tensor

    @classmethod
    def of(cls, layer) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        return cls(
            in_norm=layer.input_layernorm.weight,
            qkv_weight=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
            q_norm=attn.q_norm.weight,
            k_norm=attn.k_norm.weight,
            o_weight=attn.o_proj.weight,
            post_norm=layer.post_attention_layernorm.weight,
            gate_up_weight=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
            down_weight=mlp.down_proj.weight,
        )


class Qwen3Forward:
    """`forward(ids_BT, mask_BL, positions_BT, cache) -> last-position logits [B, V]`, writing
    the new keys and values into `cache` (a DynamicCache whose layers take `update`)."""

    def __init__(self, model) -> None:
        cfg = model.config
        self._heads, self._kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self._head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self._heads
        self._ffn = cfg.intermediate_size
        self._eps = cfg.rms_norm_eps
        self._embed = model.model.embed_tokens.weight
        self._rotary = model.model.rotary_emb
        self._final_norm = model.model.norm.weight
        self._lm_head = model.lm_head.weight
        with torch.no_grad():  # the fused copies are constants, not part of any graph
            self._layers = [_Layer.of(layer) for layer in model.model.layers]

    @staticmethod
    def for_model(model) -> Qwen3Forward | None:
        cfg = model.config
        plain = (
            type(model).__name__ == "Qwen3ForCausalLM"
            and not cfg.attention_bias
            and cfg.hidden_act == "silu"
            and all(t == "full_attention" for t in getattr(cfg, "layer_types", None) or [])
            and getattr(cfg, "_attn_implementation", None) == "sdpa"
        )
        return Qwen3Forward(model) if plain else None

    def __call__(self, ids_BT, mask_BL, positions_BT, cache) -> torch.Tensor:
        hidden_BTH = F.embedding(ids_BT, self._embed)
        cos, sin = self._rotary(hidden_BTH, positions_BT)
        rope = (cos[:, None], sin[:, None])  # broadcast over heads
        attend = _attention_mask(mask_BL, ids_BT.shape[1])
        for i, layer in enumerate(self._layers):
            hidden_BTH = self._layer(hidden_BTH, layer, rope, attend, cache.layers[i])
        last_BH = F.rms_norm(
            hidden_BTH[:, -1], (hidden_BTH.shape[-1],), self._final_norm, self._eps
        )
        return F.linear(last_BH, self._lm_head)

    def _layer(self, hidden_BTH, layer: _Layer, rope, attend, cache_layer) -> torch.Tensor:
        rows, new, width = hidden_BTH.shape
        heads, kv_heads, dim = self._heads, self._kv_heads, self._head_dim
        x = F.rms_norm(hidden_BTH, (width,), layer.in_norm, self._eps)
        q, k, v = F.linear(x, layer.qkv_weight).split(
            [heads * dim, kv_heads * dim, kv_heads * dim], -1
        )
        q = F.rms_norm(q.view(rows, new, heads, dim), (dim,), layer.q_norm, self._eps)
        k = F.rms_norm(k.view(rows, new, kv_heads, dim), (dim,), layer.k_norm, self._eps)
        q, k = _rotate(q.transpose(1, 2), *rope), _rotate(k.transpose(1, 2), *rope)
        keys, values = cache_layer.update(k, v.view(rows, new, kv_heads, dim).transpose(1, 2))
        out = _attend(q, keys, values, attend, heads // kv_heads, dim**-0.5)
        hidden_BTH = hidden_BTH + F.linear(out.reshape(rows, new, heads * dim), layer.o_weight)
        x = F.rms_norm(hidden_BTH, (width,), layer.post_norm, self._eps)
        gate, up = F.linear(x, layer.gate_up_weight).split([self._ffn, self._ffn], -1)
        return hidden_BTH + F.linear(F.silu(gate) * up, layer.down_weight)


def _rotate(x, cos, sin) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def _attention_mask(mask_BL: torch.Tensor, new: int) -> torch.Tensor:
    """Bool [B, 1, T, L], True = may attend: a row's real tokens up to the query's position.
    Every query may also see its own position, so left-padding queries (whose outputs nobody
    reads) stay finite instead of NaN from an all-masked softmax."""
    keep_B11L = mask_BL.bool()[:, None, None, :]
    if new == 1:
        return keep_B11L
    length = mask_BL.shape[1]
    causal_TL = torch.ones(new, length, dtype=torch.bool).tril(length - new)
    diagonal_TL = torch.zeros(new, length, dtype=torch.bool)
    diagonal_TL[:, length - new :] = torch.eye(new, dtype=torch.bool)
    return (keep_B11L & causal_TL) | diagonal_TL


def _attend(q, keys, values, attend, groups: int, scale: float) -> torch.Tensor:
    """SDPA with grouped-query heads; returns [B, T, heads, D]."""
    rows, heads, new, dim = q.shape
    if new == 1 and groups > 1:
        # One query token: fold each kv head's query group into the query axis, no kv copies.
        out = F.scaled_dot_product_attention(
            q.reshape(rows, heads // groups, groups, dim), keys, values, attend, scale=scale
        )
        return out.reshape(rows, heads, 1, dim).transpose(1, 2)
    if groups > 1:
        keys = keys.repeat_interleave(groups, dim=1)
        values = values.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q, keys, values, attend, scale=scale)
    return out.transpose(1, 2)
