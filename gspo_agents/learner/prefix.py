"""Prompt-prefix sharing: forward a group's common prefix once, then its G continuations.

The G samples of one task start with the same prompt. Instead of running the model over that
prompt G times, the learner runs it once ([1, P], with a KV cache), expands the cache to the G rows
as views (autograd sums their gradients back into the one prefix forward), and runs only the
continuations ([G, L - P]) on top of it. Log-probs and gradients equal the plain forward's up to
float rounding; tests prove it.

Which rows share what is a pure plan over token lists (`plan_groups`): it partitions rows into
groups with a common prefix, choosing for every set of rows between sharing their longest common
prefix and splitting them further by the next token, whichever forwards fewer tokens. A shared
prefix may run into model tokens (two samples that open the same way): their log-probs come from
the prefix forward and stay exact, so the loss mask need not be zero there.

This module is not used for MoE models (the router probe records one forward per micro-batch),
under FSDP, or with activation checkpointing (transformers drops the KV cache then); the learner
falls back to the plain forward in those cases.

Shape legend: B rows, T padded positions, P shared prefix length, S longest suffix, V vocabulary.
"""

from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from gspo_agents.learner.batching import token_budget_microbatches
from gspo_agents.learner.head import TokenHead
from gspo_agents.logprobs import TokenStats

log = logging.getLogger(__name__)

# Below this a shared prefix saves less than the extra forward call costs.
MIN_SHARED_PREFIX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class PrefixGroup:
    rows: tuple[int, ...]  # indices into the planned list of sequences
    prefix_len: int  # P: tokens every row shares; each row has at least one token after it


# ---------------------------------------------------------------------------------------------
# planning (pure)
# ---------------------------------------------------------------------------------------------
def plan_groups(
    seqs: list[list[int]], min_prefix: int = MIN_SHARED_PREFIX_TOKENS
) -> tuple[list[PrefixGroup], list[int]]:
    """Sharing groups and the rows left to a plain forward, fewest forwarded tokens first."""
    _, groups, singles = _best(list(range(len(seqs))), seqs, 0, min_prefix)
    return groups, sorted(singles)


_Plan = tuple[float, list[PrefixGroup], list[int]]  # tokens forwarded, groups, plain rows


def _best(idx: list[int], seqs: list[list[int]], known: int, min_prefix: int) -> _Plan:
    """The cheapest plan for rows `idx`, which agree on their first `known` tokens."""
    plain = float(sum(len(seqs[i]) for i in idx))
    if len(idx) == 1:
        return plain, [], list(idx)
    p = _common_prefix(idx, seqs, known)
    shared = p + sum(len(seqs[i]) - p for i in idx) if p >= min_prefix else math.inf
    best: _Plan = (plain, [], list(idx))
    if shared <= best[0]:
        best = (shared, [PrefixGroup(tuple(idx), p)], [])
    by_next: dict[int, list[int]] = {}
    for i in idx:  # every row is longer than p (the prefix leaves each row one token)
        by_next.setdefault(seqs[i][p], []).append(i)
    if len(by_next) > 1:
        parts = [_best(part, seqs, p, min_prefix) for part in by_next.values()]
        split = sum(c for c, _, _ in parts)
        if split < best[0]:
            best = (
                split,
                [g for _, gs, _ in parts for g in gs],
                [r for *_, rs in parts for r in rs],
            )
    return best


def _common_prefix(idx: list[int], seqs: list[list[int]], known: int) -> int:
    """Longest common prefix of rows `idx`, capped so every row keeps one token after it."""
    cap = min(len(seqs[i]) for i in idx) - 1
    first = seqs[idx[0]]
    p = min(known, cap)
    while p < cap and all(seqs[i][p] == first[p] for i in idx):
        p += 1
    return p


def plan_microbatches(
    rows: list[int], seqs: list[list[int]], micro_batch_tokens: int
) -> list[list[int]]:
    """Micro-batches that keep each sharing group together where the token budget allows.

    `seqs[i]` holds the real tokens of row `rows[i]`. A group costs P + g x S (its prefix once,
    then its padded suffixes); a group over the budget is cut into chunks that each still share
    the prefix. Plain rows are packed as `token_budget_microbatches` packs them.
    """
    groups, singles = plan_groups(seqs)
    units: list[tuple[int, list[int]]] = []
    for group in groups:
        units.extend(_chunks(group, seqs, micro_batch_tokens))
    units.sort(key=lambda u: u[0], reverse=True)
    bins: list[tuple[int, list[int]]] = []
    for cost, members in units:  # first fit, largest first
        fit = next((k for k, (used, _) in enumerate(bins) if used + cost <= micro_batch_tokens), -1)
        if fit < 0:
            bins.append((cost, list(members)))
        else:
            bins[fit] = (bins[fit][0] + cost, bins[fit][1] + members)
    micro = [[rows[i] for i in members] for _, members in bins]
    lengths = [len(seqs[i]) for i in singles]
    return micro + token_budget_microbatches(
        [rows[i] for i in singles], lengths, micro_batch_tokens
    )


def _chunks(group: PrefixGroup, seqs: list[list[int]], budget: int):
    """(cost, rows) pieces of one group, each within the budget where one row allows."""
    p = group.prefix_len
    members = sorted(group.rows, key=lambda i: len(seqs[i]), reverse=True)
    out: list[tuple[int, list[int]]] = []
    current: list[int] = []
    longest = 0
    for i in members:
        suffix = max(longest, len(seqs[i]) - p)
        if current and p + suffix * (len(current) + 1) > budget:
            out.append((p + longest * len(current), current))
            current, suffix = [], len(seqs[i]) - p
        current.append(i)
        longest = suffix
    out.append((p + longest * len(current), current))
    return out


# ---------------------------------------------------------------------------------------------
# the forward
# ---------------------------------------------------------------------------------------------
def shared_prefix_logprobs(
    model: nn.Module,
    ids_BT: torch.Tensor,
    attn_BT: torch.Tensor,
    temperature: float,
    chunk_tokens: int = 0,
) -> torch.Tensor:
    """Token log-probs [B, T] of right-padded rows, each sharing group's prefix forwarded once.

    Equal to `token_logprobs(model(ids_BT).logits, ids_BT)` on real tokens; padded positions hold 0.
    """
    return shared_prefix_stats(TokenHead(model, temperature, chunk_tokens), ids_BT, attn_BT)[0]


def shared_prefix_stats(head: TokenHead, ids_BT: torch.Tensor, attn_BT: torch.Tensor) -> TokenStats:
    """`TokenStats` of right-padded rows, each sharing group's prefix forwarded once."""
    B, T = ids_BT.shape
    lengths = attn_BT.sum(dim=1).tolist()
    seqs = [ids_BT[b, : lengths[b]].tolist() for b in range(B)]
    groups, singles = plan_groups(seqs)
    order: list[int] = []
    parts: list[TokenStats] = []
    for group in groups:
        rows = list(group.rows)
        stats = _group_stats(head, ids_BT[rows], attn_BT[rows], group.prefix_len)
        order += rows
        parts.append(stats)
    if singles:
        width = max(lengths[b] for b in singles)
        ids, attn = ids_BT[singles, :width], attn_BT[singles, :width]
        order += singles
        parts.append(head(ids, attention_mask=attn))
    keep = attn_BT[order].to(torch.float32)
    inverse = torch.empty(B, dtype=torch.long, device=ids_BT.device)
    inverse[torch.tensor(order, device=ids_BT.device)] = torch.arange(B, device=ids_BT.device)

    def assemble(field: int) -> torch.Tensor:
        x_BT = torch.cat([F.pad(p[field], (0, T - p[field].shape[1])) for p in parts]) * keep
        return x_BT.index_select(0, inverse)

    return TokenStats(assemble(0), assemble(1))


def _group_stats(head: TokenHead, ids_gT, attn_gT, p: int) -> TokenStats:
    """[g, P + S] stats of rows sharing their first p tokens: prefix once, suffixes on top."""
    model = head.model
    g = ids_gT.shape[0]
    width = int(attn_gT.sum(dim=1).max())
    ids_gT, attn_gT = ids_gT[:, :width], attn_gT[:, :width]
    prefix_1P = ids_gT[:1, :p]
    with head.hidden() as hidden:
        out = model(input_ids=prefix_1P, use_cache=True, **head.forward_kwargs(ids_gT.device))
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        if not _expand_cache(cache, g):
            _warn_unsupported(cache)
            return head(ids_gT, attention_mask=attn_gT)
        suffix = model(
            input_ids=ids_gT[:, p:],
            attention_mask=attn_gT,
            use_cache=True,
            **_cache_kw(model, cache),
            **head.forward_kwargs(ids_gT.device),
        )
    # the first suffix token is predicted by the prefix's last position
    if head.chunked:
        prefix_stats = head.stats(hidden[0], prefix_1P)
        h_gSH = torch.cat([hidden[0][:, -1:].expand(g, -1, -1), hidden[1]], dim=1)
        suffix_stats = head.stats(h_gSH, ids_gT[:, p - 1 :])
    else:
        prefix_stats = head.from_logits(out.logits, prefix_1P)
        logits_gSV = torch.cat([out.logits[:, -1:].expand(g, -1, -1), suffix.logits], dim=1)
        suffix_stats = head.from_logits(logits_gSV, ids_gT[:, p - 1 :])
    return TokenStats(
        *(
            torch.cat([pre.expand(g, -1), suf[:, 1:]], dim=1)
            for pre, suf in zip(prefix_stats, suffix_stats, strict=True)
        )
    )


def _expand_cache(cache, g: int) -> bool:
    """Expand a one-row KV cache to g rows as views, in place; False for layouts we do not know."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: one DynamicLayer per decoder layer
        if not layers or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
            return False
        for layer in layers:
            layer.keys = layer.keys.expand(g, -1, -1, -1)
            layer.values = layer.values.expand(g, -1, -1, -1)
        return True
    keys, values = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
    if type(cache).__name__ != "DynamicCache" or keys is None or values is None:
        return False
    for lst in (keys, values):  # older transformers: parallel lists of [1, h, P, d] tensors
        lst[:] = [t.expand(g, -1, -1, -1) for t in lst]
    return True


def _cache_kw(model: nn.Module, cache) -> dict:
    # transformers 5.x renamed the forward argument past_key_values -> cache
    takes_cache = "cache" in inspect.signature(model.forward).parameters
    return {"cache": cache} if takes_cache else {"past_key_values": cache}


_warned = False


def _warn_unsupported(cache) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "share_prompt_prefix: the model's KV cache (%s) is not a plain DynamicCache; "
            "forwarding shared prompts once per row instead",
            type(cache).__name__,
        )
