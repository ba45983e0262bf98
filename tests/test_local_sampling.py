"""LocalEngine's sampler on its own: per-row top-k/top-p, counter-based seeds, exact frequencies.

No model and no engine here; the engine-level guarantees (log-probs equal the learner's, a seeded
request draws the same tokens in any batch) are in test_local_engine.py.
"""

from __future__ import annotations

import pytest
import torch

from gspo_agents.rollout.local_sampling import counter_uniforms, filter_top_k_top_p, sample_rows


def support(logits_V: torch.Tensor, top_k: int, top_p: float) -> list[bool]:
    filtered = filter_top_k_top_p(logits_V[None], torch.tensor([top_k]), torch.tensor([top_p]))
    return torch.isfinite(filtered[0]).tolist()


def test_top_k_top_p_filter_keeps_the_right_support():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert support(logits, 2, 1.0) == [True, True, False, False]
    # top_p=0.7: 0.5 < 0.7, 0.5 + 0.3 crosses it, so the first two stay.
    assert support(logits, -1, 0.7) == [True, True, False, False]
    assert support(logits, -1, 0.4) == [True, False, False, False]
    assert support(logits, 3, 0.7) == [True, True, False, False]
    assert support(logits, -1, 1.0) == [True] * 4
    shuffled = logits[torch.tensor([2, 0, 3, 1])]
    assert support(shuffled, -1, 0.7) == [False, True, False, True]


def test_top_k_top_p_filter_applies_each_rows_own_params():
    logits_BV = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    top_k_B, top_p_B = torch.tensor([1, -1, 3]), torch.tensor([1.0, 0.7, 1.0])
    kept = torch.isfinite(filter_top_k_top_p(logits_BV, top_k_B, top_p_B)).sum(-1)
    assert kept.tolist() == [1, 2, 3]


def splitmix_reference(seed: int, position: int) -> float:
    """splitmix64 in plain Python integers: output number `position` of the stream `seed`."""
    full = (1 << 64) - 1

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & full
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & full
        return z ^ (z >> 31)

    return (mix((mix(seed) + (position + 1) * 0x9E3779B97F4A7C15) & full) >> 11) * 2.0**-53


def test_counter_uniforms_equal_a_plain_integer_splitmix64():
    seeds = [0, 1, 12345, 2**62 - 1, 987654321987]
    positions = [0, 5, 1, 100, 7]
    got = counter_uniforms(torch.tensor(seeds), torch.tensor(positions)).tolist()
    assert got == [splitmix_reference(s, p) for s, p in zip(seeds, positions, strict=True)]


def chi_square(tokens_N: torch.Tensor, probs_V: torch.Tensor) -> float:
    counts_V = torch.bincount(tokens_N, minlength=probs_V.numel())[: probs_V.numel()].double()
    expected_V = probs_V.double() * tokens_N.numel()
    return float(((counts_V - expected_V) ** 2 / expected_V).sum())


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sampled_frequencies_follow_the_softmax(temperature):
    logits_V = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    n = 40_000
    logits_NV = logits_V.expand(n, -1)
    # Across seeds at one position, and along one seed's stream.
    by_seed, _ = sample_rows(
        logits_NV, torch.full((n,), temperature), torch.arange(n), torch.zeros(n)
    )
    by_pos, _ = sample_rows(
        logits_NV, torch.full((n,), temperature), torch.full((n,), 7), torch.arange(n)
    )
    probs_V = torch.softmax(logits_V / temperature, -1)
    for tokens in (by_seed, by_pos):
        assert chi_square(tokens, probs_V) < 20.5  # chi-square, 5 d.o.f., p = 0.001


def test_filtered_sampling_follows_the_renormalised_support():
    logits_V = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    n = 40_000
    tokens, logprobs = sample_rows(
        logits_V.expand(n, -1),
        torch.ones(n),
        torch.arange(n),
        torch.zeros(n),
        top_k_B=torch.full((n,), 4),
        top_p_B=torch.full((n,), 0.9),
    )
    probs_V = torch.softmax(logits_V, -1)
    kept_V = torch.isfinite(
        filter_top_k_top_p(logits_V[None], torch.tensor([4]), torch.tensor([0.9]))
    )[0]
    assert kept_V.tolist() == [True, True, True, False, False, False]
    assert kept_V[tokens].all()  # never outside the support
    # Chi-square over the 3 kept tokens (2 d.o.f., p = 0.001).
    assert chi_square(tokens, probs_V[:3] / probs_V[:3].sum()) < 13.8
    assert torch.allclose(logprobs, torch.log(probs_V)[tokens])  # unfiltered log-probs


def test_a_rows_token_depends_on_its_seed_and_position_not_on_the_batch():
    torch.manual_seed(0)
    logits_BV = torch.randn(32, 50)
    seeds, positions = torch.arange(100, 132), torch.arange(32) % 5
    tokens, _ = sample_rows(logits_BV, torch.ones(32), seeds, positions)
    perm = torch.randperm(32)[:20]  # a different subset, in another order
    again, _ = sample_rows(logits_BV[perm], torch.ones(20), seeds[perm], positions[perm])
    assert again.tolist() == tokens[perm].tolist()
    # Neighbours that filter (top-k / top-p) do not change a full-support row's draw either.
    top_k_B = torch.where(torch.arange(32) % 2 == 0, 3, -1)
    top_p_B = torch.where(torch.arange(32) % 3 == 0, 0.5, 1.0)
    mixed, _ = sample_rows(logits_BV, torch.ones(32), seeds, positions, top_k_B, top_p_B)
    full = (top_k_B == -1) & (top_p_B == 1.0)
    assert mixed[full].tolist() == tokens[full].tolist()
    assert mixed[~full].tolist() != tokens[~full].tolist()  # the filtered rows did filter
