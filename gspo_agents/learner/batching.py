"""How one rollout batch is cut for the learner, as pure functions on row indices.

batch → `num_minibatches` minibatches (one optimizer step each) → this rank's rows of each →
micro-batches under a token budget (gradient accumulation): padded tokens (rows x longest row), or
real tokens when the rows are packed into one (packing.py). The loss of every micro-batch is
normalised by the size of its GLOBAL minibatch, so the cut changes nothing but memory and speed.
"""

from __future__ import annotations


def split_minibatches(num_rows: int, num_minibatches: int) -> list[list[int]]:
    """Contiguous, near-equal minibatches; fewer than asked when there are fewer rows."""
    if num_rows <= 0:
        return []
    n = min(num_minibatches, num_rows)
    base, extra = divmod(num_rows, n)
    out, start = [], 0
    for i in range(n):
        size = base + (1 if i < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def rank_rows(rows: list[int], rank: int, world_size: int) -> list[int]:
    """This rank's share of a minibatch (strided, so sizes differ by at most one)."""
    return rows[rank::world_size]


def token_budget_microbatches(
    rows: list[int], lengths: list[int], micro_batch_tokens: int
) -> list[list[int]]:
    """Greedy packing by length so that rows x longest row stays within the budget.

    `lengths[i]` is the real length of row `rows[i]`. A row longer than the budget gets a
    micro-batch of its own (it cannot be split: the ratio of a sequence needs all its tokens).
    """
    order = sorted(range(len(rows)), key=lambda i: lengths[i], reverse=True)
    out: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if current and new_longest * (len(current) + 1) > micro_batch_tokens:
            out.append(current)
            current, new_longest = [], lengths[i]
        current.append(rows[i])
        longest = new_longest
    if current:
        out.append(current)
    return out


def packed_microbatches(
    rows: list[int], lengths: list[int], micro_batch_tokens: int
) -> list[list[int]]:
    """First-fit decreasing by real tokens: each micro-batch's lengths sum within the budget.

    For packed (padding-free) micro-batches, where a row costs its own length only. A row longer
    than the budget gets a micro-batch of its own.
    """
    order = sorted(range(len(rows)), key=lambda i: lengths[i], reverse=True)
    bins: list[tuple[int, list[int]]] = []
    for i in order:
        fit = next(
            (k for k, (used, _) in enumerate(bins) if used + lengths[i] <= micro_batch_tokens), -1
        )
        if fit < 0:
            bins.append((lengths[i], [rows[i]]))
        else:
            bins[fit] = (bins[fit][0] + lengths[i], bins[fit][1] + [rows[i]])
    return [members for _, members in bins]
