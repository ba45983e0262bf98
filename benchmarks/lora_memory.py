"""LoRA against full fine-tuning: memory and tokens/s of one GSPO update of the same model.

Each arm is one subprocess (a fresh process, so resident memory is the arm's own): load a
random-init Qwen3-shaped model, build one batch of `--rows` trajectories of `--tokens` tokens in
all (one minibatch, one micro-batch), take on-policy log-probs, run one update (it allocates
the gradients and AdamW's two moments), then time `--repeats` more. Reported:

- trainable: parameters the optimizer updates (all of them, or the adapters alone);
- optimizer state MiB: AdamW's moments, counted from the optimizer's tensors (8 bytes per
  trainable parameter in fp32);
- first update peak MiB: the first update's peak above the loaded model (activations,
  gradients and the optimizer state it allocates);
- update peak MiB: a later update's peak above what it started with (activations, gradients);
- tokens/s: of the measured updates, wall time (`tokens/cpu-s`: CPU time, which other jobs on a
  shared machine do not stretch).

    python benchmarks/lora_memory.py                        # CPU, the default shape
    python benchmarks/lora_memory.py --ranks 8 64 --tokens 2048
    python benchmarks/lora_memory.py --device cuda --shape qwen3-1.7b --tokens 8192

On CPU memory is VmRSS / VmHWM (reset through /proc/self/clear_refs); on CUDA
torch.cuda.memory_allocated / max_memory_allocated. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from gspo_agents.tracking import BenchProgress

RESULT = "RESULT "
SHAPES = {
    # CPU-sized: the decoder blocks hold most parameters, as in real models (~25M parameters)
    "cpu-25m": dict(vocab_size=16000, hidden_size=512, intermediate_size=1536,
                    num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                    head_dim=64, tie_word_embeddings=True),
    "qwen3-1.7b": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, tie_word_embeddings=True),
}  # fmt: skip


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # "full" or a LoRA rank
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--shape", choices=sorted(SHAPES), default="cpu-25m")
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 64], help="LoRA ranks to compare")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per update (all rows)")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2, help="timed updates after the first")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the rows here")
    return p.parse_args(argv)


def write_model(shape: str) -> str:
    from transformers import AutoModelForCausalLM, Qwen3Config

    out = Path("~/.cache/gspo-agents/bench-models").expanduser() / f"lora-{shape}"
    if (out / "config.json").exists():
        return str(out)
    torch.manual_seed(0)
    config = Qwen3Config(max_position_embeddings=32768, pad_token_id=0, eos_token_id=1,
                         **SHAPES[shape])  # fmt: skip
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tmp.rename(out)
    return str(out)


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def held(device: torch.device) -> int:
    gc.collect()
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return _kib("VmRSS") * 1024


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")


def peak(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return _kib("VmHWM") * 1024


def worker(args) -> None:
    from dataclasses import replace

    from gspo_agents.learner import Learner, LearnerConfig
    from gspo_agents.models import LoraConfig
    from gspo_agents.trajectory import FlatBatch

    torch.set_num_threads(args.threads)
    rank = 0 if args.worker == "full" else int(args.worker)
    cuda = args.device == "cuda"
    cfg = LearnerConfig(
        lr=1e-5,
        num_minibatches=1,
        micro_batch_tokens=args.tokens,
        activation_checkpointing=cuda,
        mixed_precision="bf16" if cuda else "fp32",
        lora=LoraConfig(rank=rank, alpha=2.0 * max(rank, 1)),
    )
    learner = Learner(write_model(args.shape), cfg)
    device = learner.device
    g = torch.Generator().manual_seed(0)
    T = args.tokens // args.rows
    ids = torch.randint(3, learner.model.config.vocab_size, (args.rows, T), generator=g)
    mask = torch.ones(args.rows, T)
    mask[:, : T // 8] = 0.0
    adv = torch.randn(args.rows, 1, generator=g).sign() * mask
    batch = FlatBatch(ids, torch.ones_like(ids), mask, torch.zeros(args.rows, T), adv,
                      torch.where(mask.bool(), 0, -1))  # fmt: skip
    batch = replace(batch, old_logprobs_BT=learner.compute_logprobs(batch) * mask)
    before = held(device)
    reset_peak(device)
    learner.update(batch)  # allocates the optimizer state
    first_peak = peak(device) - before
    state = sum(
        t.numel() * t.element_size()
        for s in learner.optimizer.state.values()
        for t in s.values()
        if torch.is_tensor(t)
    )
    after_first = held(device)
    reset_peak(device)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.repeats):
        learner.update(batch)
    if cuda:
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    row = {
        "arm": "full" if rank == 0 else f"lora r={rank}",
        "params": sum(p.numel() for p in learner.model.parameters()),
        "trainable": learner.trainable_parameters,
        "weights_mib": before / 2**20,
        "state_mib": state / 2**20,
        "first_peak_mib": first_peak / 2**20,
        "peak_mib": (peak(device) - after_first) / 2**20,
        "tokens_per_s": args.tokens * args.repeats / wall,
        "tokens_per_cpu_s": args.tokens * args.repeats / cpu,
        "device": str(device),
    }
    print(RESULT + json.dumps(row), flush=True)
    learner.close()


def run_arm(args, arm: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", arm, "--device", args.device, "--shape",
           args.shape, "--tokens", str(args.tokens), "--rows", str(args.rows), "--repeats",
           str(args.repeats), "--threads", str(args.threads)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    raise RuntimeError(f"arm {arm} failed:\n{proc.stderr[-3000:]}")


def table(rows: list[dict]) -> str:
    out = [
        "| arm | trainable params | held after load MiB | optimizer state MiB "
        "| first update peak MiB | update peak MiB | tokens/s | tokens/cpu-s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = r["trainable"] / r["params"]
        out.append(
            f"| {r['arm']} | {r['trainable']:,} ({share:.2%}) | {r['weights_mib']:.0f} "
            f"| {r['state_mib']:.1f} | {r['first_peak_mib']:.0f} | {r['peak_mib']:.0f} "
            f"| {r['tokens_per_s']:.0f} "
            f"| {r['tokens_per_cpu_s']:.0f} |"
        )
    return "\n".join(out)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    write_model(args.shape)  # once, before the arms
    rows = []
    arms = ["full", *map(str, args.ranks)]
    progress = BenchProgress("lora_memory, arms", len(arms))
    for arm in arms:
        rows.append(run_arm(args, arm))
        progress.tick()
    print(f"shape {args.shape}, {args.tokens} tokens x {args.rows} rows, device {args.device}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
