"""LocalEngine generation against Hugging Face `model.generate`, same batch, same model, one table.

    python benchmarks/engine_generation.py                     # ~2 minutes on 2 CPU cores
    python benchmarks/engine_generation.py --repeats 5 --json gen.json --threads 1

What is measured, per config (batch B, prompt length ~P, max_new_tokens N):
- ours: B concurrent `LocalEngine.generate` calls admitted together (the engine is paused while
  they are submitted, then resumed); wall time from resume to the last answer.
- HF: one `model.generate` call on the same left-padded prompts (do_sample, temperature 1,
  top_k 0, top_p 1: the full support, as the engine samples), with the same stop tokens as
  eos_token_id.
Both sample temperature 1 over the full vocabulary in fp32 with the same torch thread count.

Early stops: the tiny model's weights are random, so it almost never emits its eos. To get the
variable-length completions of real rollouts, `--stop-rate` picks the most frequent tokens the
model samples after the prompts until their summed frequency reaches that rate, and both sides
stop at them: rows then finish at different lengths (geometric, mean ~1/rate) and HF keeps
decoding finished rows as padding until the last row ends while the engine drops them.

Prompts: `--group-sizes 1 8` runs distinct prompts, then G=8 samples per prompt (the shape of a
GSPO rollout batch: 8 tasks x 8 samples; HF gets the 64 rows as TRL passes them, repeated).

Reported: useful tokens/s (completion tokens up to and including the stop token, the same count
for both sides); the same per CPU-second of this process (all threads: on a shared machine it
moves less with other people's jobs than the wall clock); ms per step (wall / forward steps; HF:
/ generated columns). Each is the median of `--repeats` runs, ours and HF interleaved so both
see the same machine load. Prints the load average first: the CPU may be shared. Not part of
the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass

import torch

from gspo_agents.models import ModelConfig, load_model, resolve_model
from gspo_agents.rollout.engine import SamplingParams
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.tracking import BenchProgress


@dataclass(slots=True)
class Run:
    side: str  # ours | hf
    wall_s: float
    cpu_s: float  # this process's CPU time, all threads: less sensitive to other jobs
    useful_tokens: int
    steps: int

    @property
    def tokens_per_s(self) -> float:
        return self.useful_tokens / self.wall_s

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.useful_tokens / self.cpu_s

    @property
    def ms_per_step(self) -> float:
        return 1000 * self.wall_s / max(self.steps, 1)


def make_prompts(batch: int, length: int, vocab: int, seed: int, group: int = 1) -> list[list[int]]:
    """Prompts of length ~`length` (+-12%), so the batch is left-padded as in real rollouts;
    each one `group` times in a row (the G samples of a task share their prompt)."""
    g = torch.Generator().manual_seed(seed)
    spread = max(1, length // 8)
    tasks = -(-batch // group)
    lengths = torch.randint(length - spread, length + spread + 1, (tasks,), generator=g)
    unique = [torch.randint(3, vocab, (int(n),), generator=g).tolist() for n in lengths]
    return [p for p in unique for _ in range(group)][:batch]


def pick_stop_tokens(model, prompts: list[list[int]], rate: float) -> tuple[int, ...]:
    """The most frequent next tokens after the prompts, until their total share reaches rate."""
    if rate <= 0:
        return ()
    ids, mask = left_pad(prompts)
    with torch.inference_mode():
        probs = torch.softmax(model(input_ids=ids, attention_mask=mask).logits[:, -1], -1)
    share = probs.mean(0)
    order = torch.argsort(share, descending=True)
    total, picked = 0.0, []
    for tok in order.tolist():
        if total >= rate:
            break
        if share[tok] <= rate - total + 1e-9 or not picked:
            picked.append(tok)
            total += float(share[tok])
    return tuple(picked)


def left_pad(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), length, dtype=torch.long)
    mask = torch.zeros(len(prompts), length, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, length - len(p) :] = torch.tensor(p)
        mask[i, length - len(p) :] = 1
    return ids, mask


async def run_ours(engine: LocalEngine, prompts, new_tokens: int, stops, tag: str) -> Run:
    sampling = SamplingParams(max_new_tokens=new_tokens, stop_token_ids=stops)
    await engine.pause()  # hold the requests so they are admitted as one batch
    tasks = [
        asyncio.create_task(engine.generate(p, sampling, f"{tag}-{i}", ignore_eos=True))
        for i, p in enumerate(prompts)
    ]
    await asyncio.sleep(0.01)
    steps = engine.stats.forward_steps
    start, cpu = time.perf_counter(), time.process_time()
    await engine.resume()
    gens = await asyncio.gather(*tasks)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    useful = sum(len(g.token_ids) for g in gens)
    return Run("ours", wall, cpu, useful, engine.stats.forward_steps - steps)


def run_hf(model, prompts, new_tokens: int, stops, pad_id: int) -> Run:
    ids, mask = left_pad(prompts)
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=new_tokens,
            eos_token_id=list(stops) or None,
            pad_token_id=pad_id,
        )
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    new = out[:, ids.shape[1] :]
    return Run("hf", wall, cpu, useful_tokens(new, stops), new.shape[1])


def useful_tokens(new_BN: torch.Tensor, stops) -> int:
    """Tokens up to and including each row's first stop token (all of them when none)."""
    if not stops:
        return new_BN.numel()
    is_stop = torch.isin(new_BN, torch.tensor(stops))
    after = (is_stop.long().cumsum(1) - is_stop.long()) > 0  # strictly after the first stop
    return int((~after).sum())


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-lengths", type=int, nargs="+", default=[30, 230])
    p.add_argument("--new-tokens", type=int, nargs="+", default=[16, 192])
    p.add_argument(
        "--group-sizes", type=int, nargs="+", default=[1, 8], help="samples per prompt (G)"
    )
    p.add_argument("--stop-rate", type=float, default=0.02, help="0: no early stops")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    p.add_argument("--model", default="tiny", choices=["tiny", "tiny-moe"])
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


async def bench(args) -> list[dict]:
    torch.set_num_threads(args.threads)
    path = resolve_model(ModelConfig(name=args.model))
    model = load_model(path)
    vocab, pad_id = model.config.vocab_size, model.config.eos_token_id or 0
    engine = LocalEngine(path, max_batch_size=args.batch, num_threads=args.threads)
    configs = len(args.group_sizes) * len(args.prompt_lengths)
    # in tokens (batch x max_new_tokens per run), as a run's time grows with them
    progress = BenchProgress(
        "max tokens sampled, ours + HF",
        configs * sum(2 * args.repeats * args.batch * new for new in args.new_tokens),
    )
    rows = []
    try:
        for group, plen in itertools.product(args.group_sizes, args.prompt_lengths):
            prompts = make_prompts(args.batch, plen, vocab, seed=plen, group=group)
            stops = pick_stop_tokens(model, prompts, args.stop_rate)
            for new in args.new_tokens:
                await run_ours(engine, prompts[:4], 4, stops, "warm")  # first-call costs
                run_hf(model, prompts[:4], 4, stops, pad_id)
                runs: dict[str, list[Run]] = {"ours": [], "hf": []}
                for r in range(args.repeats):
                    runs["ours"].append(await run_ours(engine, prompts, new, stops, f"{plen}-{r}"))
                    progress.tick(progress.done + args.batch * new)
                    runs["hf"].append(run_hf(model, prompts, new, stops, pad_id))
                    progress.tick(progress.done + args.batch * new)
                rows.append(summarise(args.batch, group, plen, new, stops, runs))
                print_row(rows[-1])
    finally:
        await engine.close()
    return rows


def summarise(batch, group, plen, new, stops, runs) -> dict:
    row = {"batch": batch, "group": group, "prompt_len": plen, "max_new_tokens": new}
    row["stop_tokens"] = len(stops)
    for side, rs in runs.items():
        row[f"{side}_tokens_per_s"] = statistics.median(r.tokens_per_s for r in rs)
        row[f"{side}_tokens_per_cpu_s"] = statistics.median(r.tokens_per_cpu_s for r in rs)
        row[f"{side}_ms_per_step"] = statistics.median(r.ms_per_step for r in rs)
        row[f"{side}_useful_tokens"] = statistics.median(r.useful_tokens for r in rs)
        row[f"{side}_runs"] = [asdict(r) for r in rs]
    row["speedup"] = row["ours_tokens_per_s"] / row["hf_tokens_per_s"]
    row["speedup_cpu"] = row["ours_tokens_per_cpu_s"] / row["hf_tokens_per_cpu_s"]
    return row


def print_row(row: dict) -> None:
    print(
        f"B={row['batch']:3d} G={row['group']} P~{row['prompt_len']:3d} "
        f"N={row['max_new_tokens']:3d} | "
        f"ours {row['ours_tokens_per_s']:6.0f} tok/s {row['ours_tokens_per_cpu_s']:6.0f} tok/CPU-s "
        f"{row['ours_ms_per_step']:6.2f} ms/step ({row['ours_useful_tokens']:.0f} tok) | "
        f"HF {row['hf_tokens_per_s']:6.0f} tok/s {row['hf_tokens_per_cpu_s']:6.0f} tok/CPU-s "
        f"{row['hf_ms_per_step']:6.2f} ms/step ({row['hf_useful_tokens']:.0f} tok) | "
        f"x{row['speedup']:.2f} (CPU x{row['speedup_cpu']:.2f})",
        flush=True,
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    print(f"load average before: {os.getloadavg()}  threads={args.threads}", flush=True)
    rows = asyncio.run(bench(args))
    print(f"load average after: {os.getloadavg()}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
