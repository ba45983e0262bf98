"""MoE at small scale: GRPO, GRPO with routing replay and GSPO on a tiny Qwen3-MoE trained
off-policy, seeds with standard errors. In-process (the `Learner` and a plain sampler); no
environment, engine or sandbox, so it runs in minutes on a CPU.

    python experiments/moe_replay_small.py [--steps 40] [--seeds 0 1 2 3 4 5 6 7] [--lr 1e-2] \
        [--jobs 2] [--out runs/moe-replay-small]

The model (defaults): 2 layers, every one MoE with 32 experts and top-4 routing (hidden 64,
random init, same init for every arm of a seed). The task: a token bandit. A prompt is 4 random
tokens; the policy samples 16 tokens at T = 1; the reward is the share of sampled tokens in a
fixed target set (a tenth of the vocabulary). Each step samples 4 prompts x 8 samples, takes
group advantages, and trains on them with 4 minibatches x 2 `ppo_epochs` (8 optimizer steps per
batch, all against the anchor recomputed before the update), so later minibatches are off-policy
and experts move between the anchor and the step. The learning rate (Adam, 1e-2) is far above
what a real run uses, so routers move at every step: that is the regime where expert volatility
can matter.

Per arm (mean ± standard error over seeds): reward over the first and last 5 steps, the largest
drop of the 5-step reward below its running peak, collapsed seeds (that drop > 0.25), seeds that
end stuck (last-5 reward < 0.9 at entropy < 0.05: deterministic and short of the target), the clipped
token fraction (all minibatches, and the first, before any weight changed), the largest ratio, the
paper's expert volatility (activated experts that change after ONE optimizer step), and
skipped (non-finite) optimizer steps. What it cannot show: anything about 48-layer models or long
runs; the paper's collapse of GRPO without replay is a large-model, long-horizon effect.

Cost (2-core CPU, 1 torch thread per process): ~0.15 s of update per step at the defaults, plus
~4 s of imports per process; `--jobs` runs (arm, seed) pairs as parallel processes. The core
package never imports this folder.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ARMS = {
    "grpo": dict(algorithm="grpo"),
    "grpo-rr": dict(algorithm="grpo", routing_replay=True),
    "gspo": dict(algorithm="gspo"),
}
COLLAPSE_DROP = 0.25  # a 5-step reward this far below its running peak counts as a collapse
# Ends stuck: a near-deterministic policy short of the target, which no group advantage moves
# (every sample of a group alike). Defined after the first 4 seeds at lr 1e-1 showed it.
STUCK_REWARD, STUCK_ENTROPY = 0.9, 0.05
WINDOW = 5


@dataclass(frozen=True, slots=True)
class Setup:
    """Everything that defines one run but the arm and the seed."""

    steps: int = 40
    lr: float = 1e-2
    vocab: int = 300
    prompt_tokens: int = 4
    new_tokens: int = 16
    prompts: int = 4
    group: int = 8
    layers: int = 2
    experts: int = 32
    top_k: int = 4
    hidden: int = 64
    minibatches: int = 4
    epochs: int = 2
    task: str = "fixed"  # fixed: one target set; prompt: the first prompt token picks the set


def target_mask_BV(prompts_B: torch.Tensor, s: Setup) -> torch.Tensor:
    """Each row's target tokens: a tenth of the vocabulary, fixed or picked by the prompt."""
    residue_B = prompts_B % 10 if s.task == "prompt" else torch.full_like(prompts_B, 3)
    return torch.arange(s.vocab)[None, :] % 10 == residue_B[:, None]


def build_model(out_dir: str, seed: int, s: Setup) -> str:
    """The MoE, or with `experts=0` the dense control: a Qwen3 whose MLP is as wide as the
    MoE's active experts (top_k x 32)."""
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

    common = dict(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
    )
    if s.experts == 0:
        config = Qwen3Config(**common, intermediate_size=32 * s.top_k)
    else:
        config = Qwen3MoeConfig(
            **common,
            intermediate_size=128,
            moe_intermediate_size=32,
            num_experts=s.experts,
            num_experts_per_tok=s.top_k,
            decoder_sparse_step=1,
            norm_topk_prob=True,
        )
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out_dir)
    return out_dir


@torch.no_grad()
def sample(model, gen: torch.Generator, s: Setup) -> tuple[torch.Tensor, torch.Tensor]:
    """prompts x group rows of prompt + new sampled tokens, and each sampled token's log-prob."""
    prompts = torch.randint(2, s.vocab, (s.prompts, s.prompt_tokens), generator=gen)
    ids = prompts.repeat_interleave(s.group, dim=0)
    lps = []
    model.eval()
    for _ in range(s.new_tokens):
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), dim=-1)
        tok = torch.multinomial(logp.exp(), 1, generator=gen)
        lps.append(logp.gather(-1, tok))
        ids = torch.cat([ids, tok], dim=1)
    return ids, torch.cat(lps, dim=1)


def to_batch(ids: torch.Tensor, lp_new: torch.Tensor, s: Setup):
    from gspo_agents.advantages import group_advantages
    from gspo_agents.trajectory import FlatBatch

    hits_BT = target_mask_BV(ids[:, 0], s).gather(1, ids[:, s.prompt_tokens :])
    rewards = hits_BT.float().mean(dim=1)
    groups = [f"p{i // s.group}" for i in range(ids.shape[0])]
    adv_B = group_advantages(rewards.tolist(), groups).advantages_B.float()
    B, T = ids.shape
    mask = torch.zeros(B, T)
    mask[:, s.prompt_tokens :] = 1.0
    old = torch.zeros(B, T)
    old[:, s.prompt_tokens :] = lp_new
    versions = torch.where(mask.bool(), 0, -1)
    batch = FlatBatch(ids, torch.ones_like(ids), mask, old, adv_B[:, None] * mask, versions)
    return batch, float(rewards.mean())


STEP_KEYS = (
    "clip_frac_tokens",
    "clip_frac_tokens_first_mb",
    "clip_frac_seqs",
    "ratio_max",
    "expert_volatility",
    "skipped_steps",
    "entropy",
    "grad_norm_max",
    "loss",
)


def run(arm: str, seed: int, s: Setup, out: Path | None = None) -> dict:
    """One (arm, seed): `steps` updates; per-step metrics, also saved under `out`/runs/ so an
    interrupted sweep keeps its finished runs."""
    torch.set_num_threads(1)  # parallel runs share the cores; oversubscription costs ~10x
    from gspo_agents.learner import Learner, LearnerConfig

    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(str(Path(tmp) / "moe"), seed, s)  # same init for every arm
        cfg = LearnerConfig(
            lr=s.lr,
            num_minibatches=s.minibatches,
            ppo_epochs=s.epochs,
            micro_batch_tokens=4096,
            old_logprobs="recompute",
            seed=seed,
            **ARMS[arm],
        )
        learner = Learner(model_dir, cfg)
        gen = torch.Generator().manual_seed(1000 + seed)
        rows = []
        for step in range(s.steps):
            ids, lp = sample(learner.model, gen, s)
            batch, reward = to_batch(ids, lp, s)
            m = learner.update(batch)
            # a dense model reports no expert volatility
            rows.append(
                {"step": step + 1, "reward": reward, **{k: m.get(k, 0.0) for k in STEP_KEYS}}
            )
        learner.close()
    result = {"arm": arm, "seed": seed, "wall_s": time.monotonic() - start, "steps": rows}
    if out is not None:
        (out / "runs").mkdir(parents=True, exist_ok=True)
        record = {**result, "setup": asdict(s)}
        (out / "runs" / f"{arm}-seed{seed}.json").write_text(json.dumps(record))
    return result


def _run_star(args: tuple) -> dict:
    return run(*args)


def windowed(xs: list[float], w: int = WINDOW) -> list[float]:
    return [statistics.fmean(xs[max(0, i - w + 1) : i + 1]) for i in range(len(xs))]


def peak_drop(rewards: list[float]) -> float:
    """Largest fall of the w-step reward below its running peak (0 when it never falls)."""
    smooth, peak, drop = windowed(rewards), -math.inf, 0.0
    for r in smooth:
        peak = max(peak, r)
        drop = max(drop, peak - r)
    return drop


def per_seed(rows: list[dict]) -> dict[str, float]:
    """One run's summary numbers."""
    rewards = [r["reward"] for r in rows]
    n = min(WINDOW, len(rows))
    drop = peak_drop(rewards)
    last, entropy = (
        statistics.fmean(rewards[-n:]),
        statistics.fmean(r["entropy"] for r in rows[-n:]),
    )
    return {
        "reward_first": statistics.fmean(rewards[:n]),
        "reward_last": last,
        "peak_drop": drop,
        "collapsed": float(drop > COLLAPSE_DROP),
        "stuck": float(last < STUCK_REWARD and entropy < STUCK_ENTROPY),
        "clip_frac_tokens": statistics.fmean(r["clip_frac_tokens"] for r in rows),
        "clip_frac_tokens_first_mb": statistics.fmean(r["clip_frac_tokens_first_mb"] for r in rows),
        "ratio_max": max(r["ratio_max"] for r in rows),
        "expert_volatility": statistics.fmean(r["expert_volatility"] for r in rows),
        "entropy_last": entropy,
        "skipped_steps": float(sum(r["skipped_steps"] for r in rows)),
        "nonfinite_loss_updates": float(sum(not math.isfinite(r["loss"]) for r in rows)),
    }


def mean_se(xs: list[float]) -> tuple[float, float]:
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
    return statistics.fmean(xs), se


def summarize(results: list[dict]) -> dict[str, dict[str, tuple[float, float]]]:
    """arm -> metric -> (mean, standard error over seeds), plus `seeds`."""
    out = {}
    for arm in ARMS:
        seeds = [per_seed(r["steps"]) for r in results if r["arm"] == arm]
        if seeds:
            out[arm] = {k: mean_se([s[k] for s in seeds]) for k in seeds[0]}
            out[arm]["seeds"] = (float(len(seeds)), 0.0)
    return out


def paired(results: list[dict], a: str, b: str, key: str) -> tuple[float, float] | None:
    """Mean ± SE over seeds of per-seed (a - b): the arms of a seed share the initial model."""
    by = {(r["arm"], r["seed"]): per_seed(r["steps"])[key] for r in results}
    diffs = [by[(a, s)] - by[(b, s)] for (arm, s) in by if arm == a and (b, s) in by]
    return mean_se(diffs) if diffs else None


COLUMNS = (
    ("reward_first", "reward, first 5 steps"),
    ("reward_last", "reward, last 5 steps"),
    ("peak_drop", "drop below peak"),
    ("collapsed", f"collapsed (drop > {COLLAPSE_DROP})"),
    ("stuck", f"stuck (last < {STUCK_REWARD}, entropy < {STUCK_ENTROPY})"),
    ("clip_frac_tokens", "clipped tokens"),
    ("clip_frac_tokens_first_mb", "clipped tokens, 1st minibatch"),
    ("ratio_max", "max ratio"),
    ("expert_volatility", "expert volatility (1 opt. step)"),
    ("skipped_steps", "skipped (non-finite) opt. steps"),
)


def markdown(summary: dict, results: list[dict]) -> str:
    head = "| arm | seeds | " + " | ".join(c for _, c in COLUMNS) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(COLUMNS)]
    for arm, m in summary.items():
        cells = " | ".join(f"{m[k][0]:.3g} ± {m[k][1]:.2g}" for k, _ in COLUMNS)
        lines.append(f"| {arm} | {int(m['seeds'][0])} | {cells} |")
    for a, b in (("grpo", "grpo-rr"), ("gspo", "grpo"), ("gspo", "grpo-rr")):
        for key in ("reward_last", "peak_drop"):
            d = paired(results, a, b, key)
            if d is not None:
                lines.append(f"\n{key}, {a} − {b} (paired over seeds): {d[0]:+.3f} ± {d[1]:.3f}")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Setup]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Setup()
    for field, value in asdict(d).items():
        choices = ("fixed", "prompt") if field == "task" else None
        ap.add_argument(
            f"--{field.replace('_', '-')}", type=type(value), default=value, choices=choices
        )
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=1, help="parallel processes (1 thread each)")
    ap.add_argument("--out", default="runs/moe-replay-small")
    ap.add_argument("--report", metavar="DIR", help="only summarise the runs saved in DIR/runs")
    args = ap.parse_args(argv)
    return args, Setup(**{f: getattr(args, f) for f in asdict(d)})


def main(argv: list[str] | None = None) -> dict:
    args, setup = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        saved = [json.loads(p.read_text()) for p in sorted(Path(args.report).glob("runs/*.json"))]
        return write(out, saved[0]["setup"], saved, sum(r["wall_s"] for r in saved))
    tasks = [(arm, seed, setup, out) for seed in args.seeds for arm in args.arms]
    start = time.monotonic()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(_run_star, tasks, chunksize=1)
    else:
        results = [run(*t) for t in tasks]
    return write(out, asdict(setup), results, time.monotonic() - start)


def write(out: Path, setup: dict, results: list[dict], wall_s: float) -> dict:
    summary = summarize(results)
    record = {"setup": setup, "wall_s": wall_s, "summary": summary}
    (out / "results.json").write_text(json.dumps({**record, "runs": results}, indent=1))
    table = markdown(summary, results)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    return record


if __name__ == "__main__":
    main()
