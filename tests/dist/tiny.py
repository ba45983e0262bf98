"""Tiny random Qwen3 / Qwen3-MoE checkpoints and seeded synthetic batches for the learner tests.

Shared by the in-process tests and the torchrun scripts, so both sides see identical data.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gspo_agents.trajectory import FlatBatch

VOCAB = 300


def build_tiny_model(
    out_dir: str | Path, moe: bool = False, seed: int = 0, tie: bool = True
) -> str:
    """A 2-layer, hidden-64 model with random weights, saved as an HF directory."""
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        pad_token_id=0,
        eos_token_id=1,
    )
    if moe:
        config = Qwen3MoeConfig(
            **common,
            intermediate_size=128,
            moe_intermediate_size=32,
            num_experts=8,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            norm_topk_prob=True,
        )
    else:
        config = Qwen3Config(**common, intermediate_size=128)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out_dir)
    (Path(out_dir) / "tokenizer_config.json").write_text('{"marker": "copied by export_hf"}')
    return str(out_dir)


def synthetic_batch(
    seed: int, batch_size: int = 8, max_len: int = 24, prompt_len: int = 4
) -> FlatBatch:
    """Random token rows of varied length; model tokens after the prompt; group-like advantages.

    old_logprobs are left at 0: callers fill them with the policy's own log-probs (on-policy) via
    `with_old_logprobs`, so ratios start at 1 and GSPO's tight clip range is meaningful.
    """
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(prompt_len + 2, max_len + 1, (batch_size,), generator=g)
    T = int(lengths.max())
    ids = torch.randint(2, VOCAB, (batch_size, T), generator=g)
    pos = torch.arange(T)[None, :]
    attn = (pos < lengths[:, None]).long()
    ids = ids * attn
    loss_mask = ((pos >= prompt_len) & (pos < lengths[:, None])).float()
    adv_B = torch.randn(batch_size, generator=g)
    adv = adv_B[:, None] * loss_mask
    versions = torch.where(loss_mask.bool(), 0, -1)
    zeros = torch.zeros(batch_size, T)
    return FlatBatch(ids, attn, loss_mask, zeros, adv, versions)


def with_old_logprobs(batch: FlatBatch, old_BT: torch.Tensor, noise: float = 0.0, seed: int = 0):
    """The batch with behaviour log-probs `old_BT` (+ seeded noise) on its model tokens."""
    g = torch.Generator().manual_seed(seed)
    old = old_BT + noise * torch.randn(old_BT.shape, generator=g)
    old = old * batch.loss_mask_BT
    return FlatBatch(
        batch.input_ids_BT,
        batch.attention_mask_BT,
        batch.loss_mask_BT,
        old,
        batch.advantages_BT,
        batch.versions_BT,
    )
