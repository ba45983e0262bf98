"""Where do a bf16 engine's log-probs become usable directly as GSPO's anchor? Measured.

    python experiments/engine_precision.py [--models tiny tiny-moe DIR ...] \
        [--lengths 16 64 256 1024 2048] [--eps 3e-4:4e-4 1e-3:1e-3 3e-3:3e-3 1e-2:1e-2] \
        [--sequences 32] [--out runs/engine-precision]

For each model the project's `LocalEngine` samples `sequences` responses at T = 1 in bf16 (its
own decode path, KV cache and all) and reports each token's log-prob; the project's `Learner`
recomputes the same tokens' log-probs in fp32 (`compute_logprobs`, the trainer's path). On
policy the two are the same distribution, so GSPO's length-normalised sequence ratio
s = exp(mean over tokens of log pi_fp32 - log pi_bf16) should be 1; every departure is engine
numerics. Per response length L (the first L sampled tokens of each response: log-probs are
causal, so a prefix is a response of length L) and per clip range (eps_low, eps_high):

- `outside`: the share of sequences with s outside [1 - eps_low, 1 + eps_high]; the share GSPO
  would clip is this for the sign of advantage that meets the violated side, so
- `clipped`: GSPO's own clip fraction (`policy_loss`, algorithm gspo) with advantages +1 / -1 on
  alternate sequences: the clipped share a batch of mixed-sign advantages gets.

Also the spread (std over sequences) and mean of log s per length. The table gives counts of
the n sequences (the binomial SE of a share p is sqrt(p(1-p)/n); 0 of n has a 95% upper bound
of about 3/n); the lengths are prefixes of the same responses,
so rows of one model are not independent of each other. Built-in models are random-init
(`tiny`, `tiny-moe`); pass a fine-tuned directory (e.g. the SFT cold start) for sharper
distributions. `--engine-dtype float32` is the control (the log-ratio is then ~1e-7). The core
package never imports this folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import torch

from gspo_agents.models import ModelConfig, resolve_model
from gspo_agents.objectives import policy_loss
from gspo_agents.offpolicy import sequence_log_ratio
from gspo_agents.trajectory import FlatBatch

PROMPT_TOKENS = 8


def model_dir(name: str) -> str:
    if Path(name).is_dir():
        return name
    return resolve_model(ModelConfig(name=name))


async def _generate(path: str, dtype: str, n: int, new: int, seed: int) -> list[tuple]:
    from gspo_agents.rollout.engine import SamplingParams
    from gspo_agents.rollout.local_engine import LocalEngine

    engine = LocalEngine(path, dtype=dtype, max_batch_size=n, seed=seed, stop_on_eos=False)
    try:
        vocab = engine.vocab_size
        gen = torch.Generator().manual_seed(seed)
        prompts = [
            torch.randint(3, vocab, (PROMPT_TOKENS,), generator=gen).tolist() for _ in range(n)
        ]
        outs = await asyncio.gather(
            *(
                engine.generate(p, SamplingParams(max_new_tokens=new, seed=seed * n + i), f"r{i}")
                for i, p in enumerate(prompts)
            )
        )
    finally:
        await engine.close()
    return [(p, o.token_ids, o.logprobs) for p, o in zip(prompts, outs, strict=True)]


def to_batch(samples: list[tuple]) -> FlatBatch:
    """Rows of prompt + response (all the same length: no EOS stop), engine log-probs."""
    ids = torch.tensor([p + list(t) for p, t, _ in samples])
    B, T = ids.shape
    mask = torch.zeros(B, T)
    mask[:, PROMPT_TOKENS:] = 1.0
    engine_lp = torch.zeros(B, T)
    engine_lp[:, PROMPT_TOKENS:] = torch.tensor([lp for _, _, lp in samples])
    versions = torch.where(mask.bool(), 0, -1)
    return FlatBatch(ids, torch.ones_like(ids), mask, engine_lp, torch.zeros(B, T), versions)


def trainer_logprobs(path: str, batch: FlatBatch) -> torch.Tensor:
    from gspo_agents.learner import Learner, LearnerConfig

    learner = Learner(path, LearnerConfig(micro_batch_tokens=8192, algorithm="gspo"))
    try:
        return learner.compute_logprobs(batch)
    finally:
        learner.close()


def measure(trainer_BT, engine_BT, mask_BT, lengths, eps_pairs) -> list[dict]:
    B = trainer_BT.shape[0]
    adv_BT = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(B)])[:, None] * mask_BT
    rows = []
    for L in lengths:
        end = PROMPT_TOKENS + L
        t, e, m, a = trainer_BT[:, :end], engine_BT[:, :end], mask_BT[:, :end], adv_BT[:, :end]
        log_s_B = sequence_log_ratio(t, e, m)
        row = {
            "length": L,
            "sequences": B,
            "log_s_mean": float(log_s_B.mean()),
            "log_s_std": float(log_s_B.std()),
            "token_log_ratio_std": float((t - e)[m.bool()].std()),
        }
        for lo, hi in eps_pairs:
            s_B = log_s_B.exp()
            outside = float(((s_B < 1 - lo) | (s_B > 1 + hi)).float().mean())
            _, metrics = policy_loss(t, e, a, m, algorithm="gspo", eps_low=lo, eps_high=hi)
            row[f"outside@{lo:g}:{hi:g}"] = outside
            row[f"clipped@{lo:g}:{hi:g}"] = float(metrics["clip_frac_seqs"])
        rows.append(row)
    return rows


def markdown(model: str, dtype: str, rows: list[dict], eps_pairs) -> str:
    """Counts of n sequences, `outside / clipped` per ε; 0 of n has a 95% upper bound of 3/n."""
    eps_cols = [f"{lo:g}:{hi:g}" for lo, hi in eps_pairs]
    n = rows[0]["sequences"]
    head = ["length", "std log s", "mean log s"] + [f"ε {e}" for e in eps_cols]
    lines = [
        f"**{model}**, {dtype} engine vs fp32 trainer, {n} sequences; per-token log-ratio std "
        f"{rows[-1]['token_log_ratio_std']:.2g}; cells: sequences outside the band / clipped "
        "with ±1 advantages, of n",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    for r in rows:
        cells = [str(r["length"]), f"{r['log_s_std']:.2g}", f"{r['log_s_mean']:+.1g}"]
        for e in eps_cols:
            o, c = round(r[f"outside@{e}"] * n), round(r[f"clipped@{e}"] * n)
            cells.append(f"{o} / {c}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_eps(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(":")
    return float(lo), float(hi or lo)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "tiny-moe"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024, 2048])
    ap.add_argument(
        "--eps",
        type=parse_eps,
        nargs="+",
        default=[(3e-4, 4e-4), (1e-3, 1e-3), (3e-3, 3e-3), (1e-2, 1e-2)],
    )
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--engine-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/engine-precision")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record, tables = {"engine_dtype": args.engine_dtype, "models": {}}, []
    for name in args.models:
        start = time.monotonic()
        path = model_dir(name)
        samples = asyncio.run(
            _generate(path, args.engine_dtype, args.sequences, max(args.lengths), args.seed)
        )
        batch = to_batch(samples)
        trainer_BT = trainer_logprobs(path, batch)
        rows = measure(
            trainer_BT, batch.old_logprobs_BT, batch.loss_mask_BT, args.lengths, args.eps
        )
        record["models"][name] = {"rows": rows, "wall_s": time.monotonic() - start}
        tables.append(markdown(name, args.engine_dtype, rows, args.eps))
        print(tables[-1], f"\n({time.monotonic() - start:.0f} s)\n", flush=True)
    (out / "results.json").write_text(json.dumps(record, indent=1))
    (out / "summary.md").write_text("\n\n".join(tables) + "\n")
    return record


if __name__ == "__main__":
    main()
