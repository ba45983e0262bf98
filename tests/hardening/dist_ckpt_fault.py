"""torchrun script: a checkpoint save that fails under FSDP2 (2 gloo ranks) fails on EVERY rank.

Usage: torchrun --nproc_per_node=2 dist_ckpt_fault.py MODEL_DIR MOUNTPOINT (a tmpfs, as root).
Saves once, remounts MOUNTPOINT read-only (rank 0), saves again: only rank 0 touches the
filesystem before the collective write, so without agreement rank 1 would wait in DCP forever.
Both ranks must raise CheckpointError; then rank 0 remounts read-write and a save succeeds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

from gspo_agents.learner import CheckpointError, Learner, LearnerConfig  # noqa: E402


def main() -> None:
    model_dir, mount = sys.argv[1], Path(sys.argv[2])
    learner = Learner(model_dir, LearnerConfig(num_minibatches=1, micro_batch_tokens=512))
    rank = learner.rank
    batch = synthetic_batch(1)
    learner.update(with_old_logprobs(batch, learner.compute_logprobs(batch)))
    ckpt = str(mount / "checkpoint")
    learner.save_checkpoint(ckpt, {"step": 1})
    if rank == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    dist.barrier()
    try:
        learner.save_checkpoint(ckpt, {"step": 2})
        print(f"rank {rank}: saved on a read-only filesystem?!", flush=True)
    except CheckpointError as exc:
        print(f"rank {rank}: CheckpointError: {exc}", flush=True)
    if rank == 0:
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
    dist.barrier()
    learner.save_checkpoint(ckpt, {"step": 2})
    print(f"rank {rank}: saved again, step {learner.load_checkpoint(ckpt)['step']}", flush=True)
    learner.close()


if __name__ == "__main__":
    main()
