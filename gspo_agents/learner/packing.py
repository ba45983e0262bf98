"""Padding-free micro-batches: a micro-batch's sequences packed end to end into one row.

The row carries `position_ids` that restart at 0 for each sequence and no attention mask;
transformers (>= 4.56) reads the restarts as document boundaries and attends within each document
only: a block-diagonal causal mask for eager / SDPA / FlexAttention, the varlen kernel for
FlashAttention. Each token then sees exactly the tokens it sees in a padded row, and no position is
spent on padding. Stats computed on the packed row are put back into the padded [B, T] layout the
loss works in (`Packed.unpack`); a sequence's first token, which in the packed row would be
"predicted" by the previous sequence, gets 0 as in the padded path.

`packing=auto` (the default) packs only where the attention kernel skips the blocks between
documents (FlashAttention's varlen kernel, FlexAttention's block mask): there packing removes the
padding and adds nothing. SDPA and eager read packed position ids too, but through a dense
[N, N] document mask: exact, yet their attention then costs N^2 instead of the sum of each row's
length^2 (on CPU, 32 rows of 128 tokens packed ran the tiny model's update at half the speed of
padded rows), so there it takes `packing=on`. Never used (padded rows) when the transformers
version cannot read packed position ids, or for mixture-of-experts models, whose router records
are laid out per padded row (moe.py).

Shape legend: B rows, T padded positions, N packed positions (the sum of the rows' lengths).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

# attention implementations whose transformers path reads packed position ids: the first skip
# the blocks between documents (varlen kernel, block mask); the dense ones mask them, so their
# attention costs (sum of lengths)^2 instead of sum of length^2
SKIPS_CROSS_DOCUMENT = ("flash_attention_2", "flash_attention_3", "flex_attention")
DENSE_MASK = ("sdpa", "eager")


def packing_unsupported(model: nn.Module, mode: str = "auto", moe: bool = False) -> str | None:
    """Why this model will not train on packed rows under `mode` (auto / on), or None."""
    if moe:  # router records and replayed routes are laid out per padded row (moe.py)
        return "a mixture-of-experts model (router records are per padded row)"
    try:
        from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
    except ImportError:
        return "this transformers version does not read packed position ids"
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl in SKIPS_CROSS_DOCUMENT or (mode == "on" and impl in DENSE_MASK):
        return None
    if impl in DENSE_MASK:
        return f"{impl} attention would compute every cross-document block (packing=on forces it)"
    return f"attention implementation {impl!r} does not read packed position ids"


@dataclass(frozen=True, slots=True)
class Packed:
    input_ids_1N: torch.Tensor
    position_ids_1N: torch.Tensor
    index_BT: torch.Tensor  # packed position of each padded position (0 where padding)
    keep_BT: torch.Tensor  # real tokens after each row's first

    def unpack(self, x_1N: torch.Tensor) -> torch.Tensor:
        """[1, N] per-token values -> [B, T], 0 at each row's first position and on padding."""
        x_BT = x_1N[0][self.index_BT]
        return torch.where(self.keep_BT, x_BT, torch.zeros_like(x_BT))


def pack(input_ids_BT: torch.Tensor, lengths: list[int]) -> Packed:
    """Row b's first `lengths[b]` tokens, back to back in one row."""
    device = input_ids_BT.device
    B, T = input_ids_BT.shape
    lengths_B = torch.tensor(lengths, device=device)
    pos_BT = torch.arange(T, device=device).expand(B, T)
    real_BT = pos_BT < lengths_B[:, None]
    starts_B = torch.cumsum(lengths_B, 0) - lengths_B
    index_BT = torch.where(real_BT, starts_B[:, None] + pos_BT, torch.zeros_like(pos_BT))
    return Packed(
        input_ids_BT[real_BT][None],
        pos_BT[real_BT][None],
        index_BT,
        real_BT & (pos_BT > 0),
    )
