"""LocalEngine's running batch: its requests, a preallocated KV cache, mask and per-row state.

Rows are left-padded to one cache length L: each row's attention mask hides its padding and its
position ids count only its real tokens, so a padded row computes what an unpadded forward would.

Why the cache is preallocated: transformers' DynamicCache concatenates every layer's keys and
values at every decode step (a copy of the whole cache per token). Here each layer owns buffers
[B, H, capacity, D] that grow by doubling; a decode step writes one column in place and the model
sees views of the filled part. Rows that finish are dropped by moving the last live rows into
their slots (a copy of the moved rows only), so the batch stays dense; the whole cache is copied
only when a batch of new requests joins (their cache must be aligned with the running one) or
when the all-padding prefix has grown large.

This module does no sampling and knows nothing of threads or event loops.
Shape legend: B rows, L cache length (incl. left padding), C capacity (>= L), V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from gspo_agents.rollout.engine import EngineError
from gspo_agents.rollout.local_request import Request

_MIN_CAPACITY = 64


class BufferLayer(DynamicLayer):
    """A DynamicLayer whose keys/values are views [:B, :, :L] of buffers that grow by doubling."""

    def __init__(self) -> None:
        super().__init__()
        self.key_buf = torch.zeros(0, 0, 0, 0)  # [B, H, C, D], allocated at the first update
        self.value_buf = torch.zeros(0, 0, 0, 0)
        self.length = 0

    def update(self, key_states, value_states, *args, **kwargs):
        rows, _, new, _ = key_states.shape
        end = self.length + new
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
            shape = (rows, key_states.shape[1], _capacity(end), key_states.shape[3])
            self.key_buf = key_states.new_zeros(shape)
            self.value_buf = value_states.new_zeros(shape)
        elif end > self.key_buf.shape[2]:
            self.grow(end)
        self.key_buf[:rows, :, self.length : end] = key_states
        self.value_buf[:rows, :, self.length : end] = value_states
        self.length = end
        self._view(rows)
        return self.keys, self.values

    def grow(self, length: int) -> None:
        self.key_buf = _resized(self.key_buf, self.length, _capacity(length))
        self.value_buf = _resized(self.value_buf, self.length, _capacity(length))

    def _view(self, rows: int) -> None:
        self.keys = self.key_buf[:rows, :, : self.length]
        self.values = self.value_buf[:rows, :, : self.length]


def _capacity(length: int) -> int:
    return max(_MIN_CAPACITY, 2 * length)


def _resized(buf: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
    out = buf.new_zeros(buf.shape[0], buf.shape[1], capacity, buf.shape[3])
    out[:, :, :filled] = buf[:, :, :filled]
    return out


def new_cache(config) -> DynamicCache:
    cache = DynamicCache(config=config)
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:
            raise EngineError(
                f"LocalEngine supports full-attention caches only, not {type(layer).__name__} "
                "(sliding-window or other special layers)"
            )
    cache.layers = [BufferLayer() for _ in cache.layers]
    return cache


@dataclass(slots=True)
class Prefill:
    """The prefill forward of newly admitted requests. Requests with identical prompts (the G
    samples of one task) share one row: the forward runs on U unique prompts, and `row_of_B`
    maps each request to its prompt's row (None when all prompts differ)."""

    ids_UL: torch.Tensor
    mask_UL: torch.Tensor
    row_of_B: torch.Tensor | None

    @property
    def positions_UL(self) -> torch.Tensor:
        return (self.mask_UL.cumsum(-1) - 1).clamp(min=0)

    @classmethod
    def of(cls, requests: list[Request], mask_BL: torch.Tensor) -> Prefill:
        unique: dict[tuple[int, ...], int] = {}  # prompt -> its row u
        first_U: list[int] = []  # the first request of each row
        row_of: list[int] = []  # each request's row
        for i, r in enumerate(requests):
            key = tuple(r.prompt)
            if key not in unique:
                unique[key] = len(first_U)
                first_U.append(i)
            row_of.append(unique[key])
        length = mask_BL.shape[1]
        ids_UL = torch.zeros(len(unique), length, dtype=torch.long)
        for u, prompt in enumerate(unique):
            ids_UL[u, length - len(prompt) :] = torch.tensor(prompt)
        if len(unique) == len(requests):
            return cls(ids_UL, mask_BL, None)
        return cls(ids_UL, mask_BL[torch.tensor(first_U)], torch.tensor(row_of))


class Batch:
    """The worker's running batch: requests, their KV cache, attention mask and next inputs."""

    # Per-row tensors [B], kept in row order through merges and compactions.
    ROW_FIELDS = ("next_tok_B", "next_pos_B", "count_B", "seed_B", "temp_B", "top_k_B", "top_p_B")

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.rows: list[Request] = []
        self.cache: DynamicCache | None = None
        self.mask_buf = torch.zeros(0, 0, dtype=torch.long)  # [B, C]; [:, :L] is the mask
        self.next_tok_B = torch.zeros(0, dtype=torch.long)  # sampled, not yet in the cache
        self.next_pos_B = torch.zeros(0, dtype=torch.long)  # position id of next_tok_B
        self.count_B = torch.zeros(0, dtype=torch.long)  # tokens generated so far
        self.seed_B = torch.zeros(0, dtype=torch.long)
        self.temp_B = torch.zeros(0)
        self.top_k_B = torch.zeros(0, dtype=torch.long)
        self.top_p_B = torch.zeros(0)
        self.filtered = False  # some row samples from a top-k / top-p subset

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def length(self) -> int:
        return self.layers[0].length if self.cache is not None else 0

    @property
    def layers(self) -> list[BufferLayer]:
        assert self.cache is not None, "an empty batch has no cache"
        return self.cache.layers

    def mask_BL(self, extra: int = 0) -> torch.Tensor:
        return self.mask_buf[: len(self), : self.length + extra]

    @classmethod
    def for_prefill(cls, requests: list[Request], config) -> tuple[Batch, Prefill]:
        """A batch of new requests with an empty cache, and the forward that fills it."""
        batch = cls()
        batch.rows = list(requests)
        length = max(len(r.prompt) for r in requests)
        batch.mask_buf = torch.zeros(len(requests), _capacity(length), dtype=torch.long)
        for i, r in enumerate(requests):
            batch.mask_buf[i, length - len(r.prompt) : length] = 1
        batch.cache = new_cache(config)
        batch.next_pos_B = batch.mask_buf.sum(-1)
        batch.count_B = torch.zeros(len(requests), dtype=torch.long)
        batch.seed_B = torch.tensor([r.seed for r in requests], dtype=torch.long)
        batch.temp_B = torch.tensor([r.sampling.temperature for r in requests])
        batch.top_k_B = torch.tensor([r.sampling.top_k for r in requests], dtype=torch.long)
        batch.top_p_B = torch.tensor([r.sampling.top_p for r in requests])
        batch.filtered = not all(r.sampling.full_support for r in requests)
        return batch, Prefill.of(requests, batch.mask_buf[:, :length])

    def expand(self, row_of_B: torch.Tensor) -> None:
        """After a prefill of unique prompts: give every row a copy of its prompt's cache."""
        for layer in self.layers:
            layer.key_buf = layer.key_buf.index_select(0, row_of_B)
            layer.value_buf = layer.value_buf.index_select(0, row_of_B)
            layer._view(len(row_of_B))

    def open_column(self) -> torch.Tensor:
        """Unmask the column the next decode step writes; return the mask including it."""
        length = self.length
        if length + 1 > self.mask_buf.shape[1]:
            self._grow(length + 1)
        self.mask_buf[: len(self), length] = 1
        return self.mask_BL(extra=1)

    def _grow(self, length: int) -> None:
        for layer in self.layers:
            layer.grow(length)
        capacity = self.layers[0].key_buf.shape[2]
        mask = self.mask_buf.new_zeros(self.mask_buf.shape[0], capacity)
        mask[:, : self.length] = self.mask_buf[:, : self.length]
        self.mask_buf = mask

    def keep(self, keep: list[int]) -> None:
        """Keep only rows `keep` (ascending). Live rows past the new end move into the freed
        slots below it, so only the moved rows' cache is copied; row order changes."""
        if len(keep) == len(self.rows):
            return
        if not keep:
            self._clear()
            return
        size, alive = len(keep), set(keep)
        holes = [i for i in range(size) if i not in alive]
        movers = [i for i in keep if i >= size]
        order = list(range(size))
        for hole, mover in zip(holes, movers, strict=True):
            order[hole] = mover
        if holes:
            dst, src = torch.tensor(holes), torch.tensor(movers)
            end = self.length
            for layer in self.layers:
                layer.key_buf[dst, :, :end] = layer.key_buf[src, :, :end]
                layer.value_buf[dst, :, :end] = layer.value_buf[src, :, :end]
            self.mask_buf[dst] = self.mask_buf[src]
        self.rows = [self.rows[i] for i in order]
        index = torch.tensor(order)
        for name in self.ROW_FIELDS:
            setattr(self, name, getattr(self, name)[index])
        for layer in self.layers:
            layer._view(size)
        self._trim_padding()

    def _trim_padding(self) -> None:
        """Drop cache columns that are padding in every row, once they are a large share."""
        mask_BL = self.mask_BL()
        start = int((mask_BL.sum(0) == 0).long().cumprod(0).sum())
        if start >= max(16, mask_BL.shape[1] // 4):
            self._realign([(self, start)])

    def merge(self, new: Batch) -> None:
        """Append `new`'s rows, left-padding the shorter cache (zeros, masked out)."""
        if not new.rows:
            return
        if not self.rows:
            for name in ("rows", "cache", "mask_buf", "filtered", *self.ROW_FIELDS):
                setattr(self, name, getattr(new, name))
            return
        for name in self.ROW_FIELDS:
            setattr(self, name, torch.cat([getattr(self, name), getattr(new, name)]))
        self.filtered = self.filtered or new.filtered
        self._realign([(self, 0), (new, 0)])
        self.rows = self.rows + new.rows

    def _realign(self, parts: list[tuple[Batch, int]]) -> None:
        """Rebuild this batch's cache and mask from `parts` (batch, first column kept), each
        right-aligned to the longest: one copy of every part's live cache."""
        lengths = [b.length - start for b, start in parts]
        length = max(lengths)
        rows = sum(len(b) for b, _ in parts)
        capacity = _capacity(length)
        mask = torch.zeros(rows, capacity, dtype=torch.long)
        layers = [BufferLayer() for _ in self.layers]
        for i, layer in enumerate(layers):
            ref = self.layers[i].key_buf
            shape = (rows, ref.shape[1], capacity, ref.shape[3])
            layer.key_buf, layer.value_buf = ref.new_zeros(shape), ref.new_zeros(shape)
            layer.length, layer.device, layer.is_initialized = length, ref.device, True
        row = 0
        for (b, start), part_len in zip(parts, lengths, strict=True):
            n, off, end = len(b), length - part_len, b.length
            mask[row : row + n, off:length] = b.mask_buf[:n, start:end]
            for mine, theirs in zip(layers, b.layers, strict=True):
                mine.key_buf[row : row + n, :, off:length] = theirs.key_buf[:n, :, start:end]
                mine.value_buf[row : row + n, :, off:length] = theirs.value_buf[:n, :, start:end]
            row += n
        for layer in layers:
            layer._view(rows)
        assert self.cache is not None
        self.cache.layers, self.mask_buf = layers, mask
