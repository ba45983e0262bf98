"""A seeded toy policy (a linear layer over token embeddings) and one minibatch, shared by the
single-process and the torchrun side of the objective normalisation test."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_agents.logprobs import token_logprobs
from gspo_agents.objectives import policy_loss

B, T, V, H = 6, 9, 11, 5


@dataclass(slots=True)
class Problem:
    weight: torch.Tensor  # [V, H] the only parameter
    embed: torch.Tensor  # [V, H] fixed
    input_ids_BT: torch.Tensor
    mask_BT: torch.Tensor
    old_logprobs_BT: torch.Tensor
    advantages_BT: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.input_ids_BT.shape[0])


def make_problem(seed: int = 0) -> Problem:
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(V, H, generator=g)
    embed = torch.randn(V, H, generator=g)
    ids = torch.randint(0, V, (B, T), generator=g)
    lengths = torch.tensor([9, 4, 7, 2, 9, 5])
    mask = torch.zeros(B, T)
    for b, n in enumerate(lengths.tolist()):
        mask[b, 2:n] = 1.0  # prompt of 2 tokens, then model tokens, then padding
    with torch.no_grad():
        lp = token_logprobs((embed[ids] @ weight.T), ids)
    # behaviour log-probs a little off the current policy, so that some ratios clip
    old = lp + 0.3 * torch.randn(B, T, generator=g)
    adv_B = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.7, -0.2])
    return Problem(weight, embed, ids, mask, old, adv_B[:, None].expand(B, T).clone())


def loss_and_grad(
    problem: Problem, algorithm: str, rows: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss of `rows` normalised by the full batch size, and its gradient w.r.t. the weight."""
    weight = problem.weight.clone().requires_grad_(True)
    ids = problem.input_ids_BT[rows]
    lp = token_logprobs(problem.embed[ids] @ weight.T, ids)
    loss, _ = policy_loss(
        lp,
        problem.old_logprobs_BT[rows],
        problem.advantages_BT[rows],
        problem.mask_BT[rows],
        algorithm=algorithm,
        eps_low=0.2,
        eps_high=0.27,
        num_sequences=problem.batch_size,
    )
    loss.backward()
    return loss.detach(), weight.grad.detach()
