"""MoE at small scale: GRPO, GRPO with routing replay and GSPO on a tiny Qwen3-MoE trained
off-policy, seeds with standard errors. In-process (the `Learner` and a plain sampler); no
environment, engine or sandbox, so it runs in minutes on a CPU.

    python experiments/moe_replay_small.py [--steps 20] [--seeds 0 1 2] [--lr 1e-2] \
        [--out runs/moe-replay-small]

The model: 2 layers, every one MoE with 16 experts and top-2 routing (hidden 64, random init).
The task: a token bandit. A prompt is 4 random tokens; the policy samples 8 tokens at T = 1;
the reward is the share of sampled tokens in a fixed target set (a tenth of the vocabulary).
Each step samples 4 prompts x 8 samples, takes group advantages, and trains on them with 4
minibatches x 2 `ppo_epochs` (8 optimizer steps per batch of samples, all against the anchor
recomputed before the update), so later minibatches are off-policy and experts move between
the anchor and the step.

Per arm (mean ± standard error over seeds): reward over the first and last 3 steps, clipped-token
fraction, the paper's expert volatility (activated experts that change after ONE optimizer step),
skipped (non-finite) steps. What it cannot show: anything about 48-layer models or long runs;
the paper's collapse of GRPO without replay is a large-model, long-horizon effect.
Cost: one arm, one seed, 2 steps took 31 s of CPU (7 min wall on a 2-core machine under load
~20), so the default 3 arms x 3 seeds x 20 steps is ~45 CPU-minutes; not yet run at that size.
The core package never imports this folder.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from gspo_agents.advantages import group_advantages
from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.trajectory import FlatBatch

VOCAB, PROMPT, NEW, PROMPTS, G = 300, 4, 8, 4, 8
TARGET = torch.arange(VOCAB) % 10 == 3  # a fixed tenth of the vocabulary
ARMS = {
    "grpo": dict(algorithm="grpo"),
    "grpo-rr": dict(algorithm="grpo", routing_replay=True),
    "gspo": dict(algorithm="gspo"),
}


def build_model(out_dir: str, seed: int) -> str:
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    config = Qwen3MoeConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=16,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        norm_topk_prob=True,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out_dir)
    return out_dir


@torch.no_grad()
def sample(model, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """PROMPTS x G rows of prompt + NEW sampled tokens, and each sampled token's log-prob."""
    prompts = torch.randint(2, VOCAB, (PROMPTS, PROMPT), generator=gen)
    ids = prompts.repeat_interleave(G, dim=0)
    lps = []
    model.eval()
    for _ in range(NEW):
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), dim=-1)
        tok = torch.multinomial(logp.exp(), 1, generator=gen)
        lps.append(logp.gather(-1, tok))
        ids = torch.cat([ids, tok], dim=1)
    return ids, torch.cat(lps, dim=1)


def to_batch(ids: torch.Tensor, lp_new: torch.Tensor) -> tuple[FlatBatch, float]:
    rewards = TARGET[ids[:, PROMPT:]].float().mean(dim=1)
    groups = [f"p{i // G}" for i in range(ids.shape[0])]
    adv_B = group_advantages(rewards.tolist(), groups).advantages_B.float()
    B, T = ids.shape
    mask = torch.zeros(B, T)
    mask[:, PROMPT:] = 1.0
    old = torch.zeros(B, T)
    old[:, PROMPT:] = lp_new
    versions = torch.where(mask.bool(), 0, -1)
    batch = FlatBatch(ids, torch.ones_like(ids), mask, old, adv_B[:, None] * mask, versions)
    return batch, float(rewards.mean())


def run(arm: str, seed: int, steps: int, lr: float, model_dir: str) -> dict:
    cfg = LearnerConfig(
        lr=lr,
        num_minibatches=4,
        ppo_epochs=2,
        micro_batch_tokens=512,
        old_logprobs="recompute",
        seed=seed,
        **ARMS[arm],
    )
    learner = Learner(model_dir, cfg)
    gen = torch.Generator().manual_seed(1000 + seed)
    rows = []
    for step in range(steps):
        ids, lp = sample(learner.model, gen)
        batch, reward = to_batch(ids, lp)
        m = learner.update(batch)
        rows.append(
            {
                "step": step + 1,
                "reward": reward,
                "clip_frac_tokens": m["clip_frac_tokens"],
                "expert_volatility": m["expert_volatility"],
                "skipped_steps": m["skipped_steps"],
                "entropy": m["entropy"],
            }
        )
    learner.close()
    return {"arm": arm, "seed": seed, "steps": rows}


def mean_se(xs: list[float]) -> str:
    m = statistics.fmean(xs)
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
    return f"{m:.3f} ± {se:.3f}"


def summarize(results: list[dict]) -> str:
    lines = [
        "| arm | reward, first 3 steps | reward, last 3 steps | clipped tokens | expert "
        "volatility (1 step) | skipped steps |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arm in ARMS:
        runs = [r["steps"] for r in results if r["arm"] == arm]
        if not runs:
            continue

        def per_seed(key, rows_of=lambda s: s, runs=runs):
            return [statistics.fmean(x[key] for x in rows_of(s)) for s in runs]

        first = per_seed("reward", lambda s: s[:3])
        last = per_seed("reward", lambda s: s[-3:])
        skipped = [sum(x["skipped_steps"] for x in s) for s in runs]
        lines.append(
            f"| {arm} | {mean_se(first)} | {mean_se(last)} | {mean_se(per_seed('clip_frac_tokens'))}"
            f" | {mean_se(per_seed('expert_volatility'))} | {mean_se(skipped)} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--out", default="runs/moe-replay-small")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            model_dir = build_model(str(Path(tmp) / f"moe{seed}"), seed)  # same init for every arm
            for arm in args.arms:
                results.append(run(arm, seed, args.steps, args.lr, model_dir))
                print(f"{arm} seed {seed}: {time.monotonic() - start:.0f} s", flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table = summarize(results)
    (out / "summary.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
