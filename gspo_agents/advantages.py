"""Group-relative advantages: one per sequence (GSPO, GRPO) or one per turn (GSPO-token).

Pure functions of rewards and group ids; nothing here knows about models or tokens.

- `group_advantages`: A_i = (r_i - mean_g r) / (std_g r + eps), the paper's sequence advantage.
- `turn_advantages`: per-turn credit for multi-turn episodes. Turn k of trajectory i gets the
  return-to-go G_i,k = sum_{j >= k} gamma^(j-k) r_i,j of its turn rewards, normalised within the
  group: A_i,k = (G_i,k - mean_g G) / (std_g G + eps), where the mean and std pool every turn of
  every trajectory in the group (a turn is one sample of "what followed from here"). With one turn
  per episode it is exactly `group_advantages`; with terminal-only rewards, gamma = 1 and equal
  turn counts it is the sequence advantage on every turn. Otherwise later turns are credited only
  with what happened from them on, which is what makes GSPO-token differ from GSPO.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "GroupAdvantages",
    "TurnAdvantages",
    "group_advantages",
    "turn_advantages",
    "turn_returns",
]


@dataclass(frozen=True, slots=True)
class GroupAdvantages:
    # (r - group mean) / (group std + eps); exactly 0 in zero-spread groups
    advantages_B: torch.Tensor
    zero_spread_B: torch.Tensor  # bool: the sequence's group has no reward spread (no signal)
    num_groups: int
    num_zero_spread_groups: int

    @property
    def zero_spread_frac(self) -> float:
        return self.num_zero_spread_groups / max(self.num_groups, 1)


def _group_index(group_ids_B: torch.Tensor | Sequence[Hashable], n: int) -> torch.Tensor:
    if isinstance(group_ids_B, torch.Tensor):
        group_ids_B = group_ids_B.tolist()
    if len(group_ids_B) != n:
        raise ValueError(f"{n} rewards but {len(group_ids_B)} group ids")
    index: dict[Hashable, int] = {}
    return torch.tensor([index.setdefault(g, len(index)) for g in group_ids_B], dtype=torch.long)


def _normalise(
    values_N: torch.Tensor, gid_N: torch.Tensor, G: int, eps: float, scale: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values - group mean) [/ (group std + eps)] per element, and each group's zero-spread flag."""
    count_G = torch.zeros(G).index_add_(0, gid_N, torch.ones_like(values_N))
    mean_G = torch.zeros(G).index_add_(0, gid_N, values_N) / count_G.clamp(min=1)
    centred_N = values_N - mean_G[gid_N]
    std_G = (torch.zeros(G).index_add_(0, gid_N, centred_N**2) / count_G.clamp(min=1)).sqrt()
    # "zero spread" relative to the reward scale, so float noise in the mean does not count as signal
    zero_G = std_G <= 1e-8 * (1.0 + mean_G.abs())
    out_N = centred_N / (std_G[gid_N] + eps) if scale else centred_N
    return torch.where(zero_G[gid_N], torch.zeros_like(values_N), out_N), zero_G


def group_advantages(
    rewards_B: torch.Tensor | Sequence[float],
    group_ids_B: torch.Tensor | Sequence[Hashable],
    eps: float = 1e-6,
    *,
    normalize_std: bool = True,
) -> GroupAdvantages:
    """Group-normalised advantages A_i = (r_i - mean_g r) / (std_g r + eps).

    std is the population std of the group (a group of one has zero spread). Groups whose rewards
    are all equal carry no learning signal: their advantages are exactly 0 and they are counted;
    whether to drop them is the caller's decision (`zero_spread_B`). `normalize_std=False` keeps
    only the mean baseline (A_i = r_i - mean_g r; Dr. GRPO's choice).
    """
    rewards = torch.as_tensor(rewards_B, dtype=torch.float32)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    gid_B = _group_index(group_ids_B, rewards.shape[0])
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite (an infrastructure failure is not a reward)")
    G = int(gid_B.max()) + 1 if gid_B.numel() else 0
    adv_B, zero_G = _normalise(rewards, gid_B, G, eps, normalize_std)
    return GroupAdvantages(adv_B, zero_G[gid_B], G, int(zero_G.sum()))


def turn_returns(turn_rewards: Sequence[float], gamma: float) -> list[float]:
    """Returns-to-go over turns: G_k = r_k + gamma * G_{k+1}."""
    out = [0.0] * len(turn_rewards)
    g = 0.0
    for k in range(len(turn_rewards) - 1, -1, -1):
        g = float(turn_rewards[k]) + gamma * g
        out[k] = g
    return out


@dataclass(frozen=True, slots=True)
class TurnAdvantages:
    advantages: list[list[float]]  # per trajectory, one per turn
    zero_spread_B: torch.Tensor  # bool: no spread among the group's turn returns (no signal)
    num_groups: int
    num_zero_spread_groups: int

    @property
    def zero_spread_frac(self) -> float:
        return self.num_zero_spread_groups / max(self.num_groups, 1)


def turn_advantages(
    turn_rewards_B: Sequence[Sequence[float]],
    group_ids_B: torch.Tensor | Sequence[Hashable],
    *,
    gamma: float = 1.0,
    eps: float = 1e-6,
    normalize_std: bool = True,
) -> TurnAdvantages:
    """Per-turn advantages: returns-to-go with discount `gamma`, normalised within each group over
    all turns of all its trajectories (see the module docstring). Every trajectory needs >= 1 turn.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"the turn discount gamma must be in [0, 1], got {gamma}")
    B = len(turn_rewards_B)
    gid_B = _group_index(group_ids_B, B)
    returns = [turn_returns(r, gamma) for r in turn_rewards_B]
    for i, g in enumerate(returns):
        if not g:
            raise ValueError(f"trajectory {i} has no turn rewards; every episode has >= 1 turn")
    flat_N = torch.tensor([x for g in returns for x in g], dtype=torch.float32)
    if not bool(torch.isfinite(flat_N).all()):
        raise ValueError("turn rewards must be finite (an infrastructure failure is not a reward)")
    gid_N = torch.repeat_interleave(gid_B, torch.tensor([len(g) for g in returns]))
    G = int(gid_B.max()) + 1 if B else 0
    adv_N, zero_G = _normalise(flat_N, gid_N, G, eps, normalize_std)
    out, start = [], 0
    for g in returns:
        out.append(adv_N[start : start + len(g)].tolist())
        start += len(g)
    return TurnAdvantages(out, zero_G[gid_B], G, int(zero_G.sum()))
