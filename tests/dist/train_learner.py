"""torchrun (or plain python) script: a seeded multi-step learner run on synthetic batches.

Writes <out>/metrics.jsonl (rank 0, one line per step, timing keys dropped) and, at the end,
<out>/final (an HF export). With --ckpt it saves a checkpoint every --save-every steps; with
--kill-after-step K rank 0 SIGKILLs itself right after step K's update (no cleanup, no save);
with --resume it continues from the checkpoint.

The batch of step k depends only on (seed, k), and its behaviour log-probs are the current policy's
plus seeded noise, so a resumed run sees exactly the data the uninterrupted run saw.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

from gspo_agents.learner import Learner, LearnerConfig  # noqa: E402
from gspo_agents.models import LoraConfig  # noqa: E402

TIMING_KEYS = ("update_time_s", "update_tokens_per_s")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algorithm", default="gspo")
    p.add_argument("--eps-high", type=float, default=None)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--micro-batch-tokens", type=int, default=40)
    p.add_argument("--ckpt", default=None)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--kill-after-step", type=int, default=-1)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--old-logprobs", default="engine")
    p.add_argument("--seq-is-cap", type=float, default=None)
    p.add_argument("--loss-agg", default="seq-mean-token-mean")
    p.add_argument("--routing-replay", action="store_true")
    p.add_argument("--kl-coef", type=float, default=0.0)
    p.add_argument("--entropy-coef", type=float, default=0.0)
    p.add_argument("--ppo-epochs", type=int, default=1)
    p.add_argument("--logprob-chunk-tokens", type=int, default=LearnerConfig().logprob_chunk_tokens)
    p.add_argument("--packing", default="auto", help="auto, on (any attention) or off")
    p.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank (0: off)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    cfg = LearnerConfig(
        algorithm=args.algorithm,
        eps_high=args.eps_high,
        lr=args.lr,
        warmup_steps=3,
        num_minibatches=4,
        micro_batch_tokens=args.micro_batch_tokens,
        seed=args.seed,
        activation_checkpointing=args.activation_checkpointing,
        old_logprobs=args.old_logprobs,
        seq_is_cap=args.seq_is_cap,
        loss_agg=args.loss_agg,
        routing_replay=args.routing_replay,
        kl_coef=args.kl_coef,
        entropy_coef=args.entropy_coef,
        ppo_epochs=args.ppo_epochs,
        logprob_chunk_tokens=args.logprob_chunk_tokens,
        packing=args.packing,
        lora=LoraConfig(rank=args.lora_rank, alpha=2.0 * args.lora_rank),
    )
    learner = Learner(args.model, cfg)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = learner.load_checkpoint(args.ckpt)["next_step"] if args.resume else 0
    for step in range(start, args.steps):
        batch = synthetic_batch(args.seed * 1000 + step, batch_size=args.batch_size)
        batch = with_old_logprobs(batch, learner.compute_logprobs(batch), noise=0.02, seed=step)
        metrics = learner.update(batch)
        if learner.is_main:
            row = {k: v for k, v in metrics.items() if k not in TIMING_KEYS}
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "world_size": learner.world_size, **row}) + "\n")
        if step == args.kill_after_step and learner.is_main:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.ckpt and args.save_every and (step + 1) % args.save_every == 0:
            learner.save_checkpoint(args.ckpt, {"next_step": step + 1})
    learner.export_hf(str(out / "final"))
    learner.close()


if __name__ == "__main__":
    from gspo_agents.learner.parallel import run_then_exit

    run_then_exit(main)
