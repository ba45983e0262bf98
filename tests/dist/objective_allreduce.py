"""torchrun script: each rank computes the policy loss on its slice of one global minibatch,
normalised by the GLOBAL size; the summed loss and gradients must equal one process on all of it.

Usage: torchrun --nproc_per_node=2 objective_allreduce.py ALGORITHM OUT_PATH
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from objective_data import loss_and_grad, make_problem  # noqa: E402


def main() -> None:
    algorithm, out_path = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    problem = make_problem()
    rows = list(range(rank, problem.batch_size, world))
    loss, grad = loss_and_grad(problem, algorithm, rows)
    dist.all_reduce(loss)
    dist.all_reduce(grad)
    if rank == 0:
        torch.save({"loss": loss, "grad": grad, "world": world}, out_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    from gspo_agents.learner.parallel import run_then_exit

    run_then_exit(main)
