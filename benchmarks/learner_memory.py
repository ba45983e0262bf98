"""Learner memory: peak memory and tokens/s of one GSPO update against trajectory length.

Two paths of the same `Learner.update`, on a model with Qwen3's vocabulary (151,936):

- today  : full [T, V] logits, padded rows (`logprob_chunk_tokens=0, packing=off`)
- chunked: the output layer a chunk of positions at a time, recomputed in backward, packed rows
           where the attention kernel allows (the defaults; with one row, packing changes nothing)

Each point is one subprocess (so that running out of memory is a row of the table, not the end of
the run): load the model, build a batch of `--rows` trajectories of T/rows tokens (one minibatch,
one micro-batch), take on-policy log-probs, on CUDA run one warm-up update, then reset the peak
and time one update. "Peak over setup" is that update's peak minus the memory held before it
(weights, batch; after a warm-up also gradients and AdamW state): what the update itself needs.

    python benchmarks/learner_memory.py                       # CPU: 2-layer hidden-64 model
    python benchmarks/learner_memory.py --tokens 1024 8192 --paths chunked
    python benchmarks/learner_memory.py --device cuda --shape qwen3-1.7b --tokens 16384 65536
    python benchmarks/learner_memory.py --device cuda --shape qwen3-1.7b --longest

On CPU, memory is the process's resident peak (VmHWM, reset through /proc/self/clear_refs) and each
worker runs under an address-space limit (`--mem-limit-gib`) so that a point too large fails
with an allocation error instead of waking the machine's OOM killer. On CUDA it is
`torch.cuda.max_memory_allocated`, the update runs in bf16 autocast with activation checkpointing,
and the table adds model FLOP utilisation: 6 x parameters x tokens plus causal attention
(6 x layers x T^2 x heads x head_dim per sequence) over `--peak-tflops`. `--longest` doubles T
from 8,192 until an update no longer fits and reports the longest that trained.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from gspo_agents.tracking import BenchProgress

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_throughput import RANDOM_SHAPES, write_random_model  # noqa: E402

RESULT = "RESULT "
PATHS = {
    "today": dict(logprob_chunk_tokens=0, packing="off"),
    "chunked": dict(logprob_chunk_tokens=1024, packing="auto"),
}
DEFAULT_TOKENS = [1024, 2048, 4096, 8192, 16384, 32768]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--path", choices=sorted(PATHS), help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--shape", choices=sorted(RANDOM_SHAPES), default=None,
                   help="random-init model shape (default: vocab151k-2x64 on CPU, "
                   "qwen3-1.7b on CUDA)")  # fmt: skip
    p.add_argument("--tokens", type=int, nargs="+", default=None, help="trajectory lengths")
    p.add_argument(
        "--rows", type=int, default=1, help="trajectories per update (T/rows tokens each)"
    )
    p.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=["today", "chunked"])
    p.add_argument(
        "--chunk", type=int, default=1024, help="the chunked path's logprob_chunk_tokens"
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (CPU)")
    p.add_argument("--mem-limit-gib", type=float, default=None,
                   help="CPU workers' address-space limit (default: 70%% of MemAvailable)")  # fmt: skip
    p.add_argument("--skip-today-above", type=int, default=None,
                   help="do not run today's path beyond this many tokens (known not to fit)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=None,
                   help="1: a warm-up update before the measured one (default: on CUDA only; on "
                   "CPU the first update also allocates the AdamW state, 8 bytes/parameter)")  # fmt: skip
    p.add_argument("--longest", action="store_true", help="CUDA: longest T that trains, per path")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="the device's dense bf16 peak for MFU (H100/H200 SXM: 989)")  # fmt: skip
    p.add_argument("--timeout-s", type=float, default=3600, help="per point")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--table-from", nargs="+", default=None, metavar="JSON",
                   help="print one table from rows that earlier runs wrote with --json, and exit")  # fmt: skip
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------
# worker: one path, one length
# --------------------------------------------------------------------------------------------
def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


class PeakMemory:
    """Bytes the code inside `measure()` needed above what was held when it started."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def held(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return _rss_kib("VmRSS") * 1024

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to VmRSS

    def peak(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        return _rss_kib("VmHWM") * 1024


def make_batch(tokens: int, rows: int, vocab: int):
    from gspo_agents.trajectory import FlatBatch

    g = torch.Generator().manual_seed(0)
    T = tokens // rows
    ids = torch.randint(3, vocab, (rows, T), generator=g)
    mask = torch.ones(rows, T)
    mask[:, : max(1, T // 8)] = 0.0  # a prompt, then model tokens
    adv = torch.randn(rows, 1, generator=g).sign() * mask  # nonzero: a gradient everywhere
    versions = torch.where(mask.bool(), 0, -1)
    return FlatBatch(ids, torch.ones(rows, T, dtype=torch.long), mask, torch.zeros(rows, T), adv,
                     versions)  # fmt: skip


def worker(args) -> None:
    from dataclasses import replace

    from gspo_agents.learner import Learner, LearnerConfig

    cuda = args.device == "cuda"
    tokens = args.tokens[0]
    paths = {**PATHS, "chunked": {**PATHS["chunked"], "logprob_chunk_tokens": args.chunk}}
    cfg = LearnerConfig(
        algorithm="gspo",
        lr=1e-6,
        num_minibatches=1,
        micro_batch_tokens=tokens,
        activation_checkpointing=cuda,
        mixed_precision="bf16" if cuda else "fp32",
        **paths[args.path],
    )
    learner = Learner(args.model, cfg)
    memory = PeakMemory(learner.device)
    batch = make_batch(tokens, args.rows, learner.model.config.vocab_size)
    batch = replace(batch, old_logprobs_BT=learner.compute_logprobs(batch) * batch.loss_mask_BT)
    if args.warmup:  # AdamW state, allocator caches, kernel selection
        learner.update(batch)
    gc.collect()
    held = memory.held()
    memory.reset()
    if cuda:
        torch.cuda.synchronize()
    start, cpu_start = time.perf_counter(), time.process_time()
    metrics = learner.update(batch)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start  # on a shared CPU: other jobs stretch only wall
    params = sum(p.numel() for p in learner.model.parameters())
    row = {
        "path": args.path,
        "tokens": tokens,
        "rows": args.rows,
        "device": str(learner.device),
        "held_gib": held / 2**30,
        "peak_over_setup_gib": (memory.peak() - held) / 2**30,
        "s_per_update": seconds,
        "tokens_per_s": tokens / seconds,
        "tokens_per_cpu_s": tokens / cpu_seconds,
        "entropy": metrics["entropy"],
        "skipped_steps": metrics["skipped_steps"],
        "params": params,
    }
    if cuda:
        c = learner.model.config
        T = tokens // args.rows
        attention = 6 * c.num_hidden_layers * T * T * c.num_attention_heads * c.head_dim
        flops = 6 * params * tokens + args.rows * attention
        row["model_tflops"] = flops / seconds / 1e12
        row["mfu"] = row["model_tflops"] / args.peak_tflops
        row["gpu"] = torch.cuda.get_device_name(learner.device)
    print(RESULT + json.dumps(row), flush=True)
    learner.close()


# --------------------------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------------------------
def _mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 8.0


def _limit_address_space(gib: float):
    def apply() -> None:
        limit = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def run_point(args, path: str, tokens: int) -> dict:
    cmd = [
        sys.executable, __file__, "--worker", "--path", path, "--model", args.model,
        "--device", args.device, "--tokens", str(tokens), "--rows", str(args.rows),
        "--chunk", str(args.chunk), "--threads", str(args.threads), "--warmup", str(args.warmup),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    limit = None if args.device == "cuda" else _limit_address_space(args.mem_limit_gib)
    print(f"[{path} {tokens}] starting", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=args.timeout_s, preexec_fn=limit
        )
    except subprocess.TimeoutExpired:
        return {"path": path, "tokens": tokens, "failed": f"over {args.timeout_s:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    tail = proc.stderr.strip().splitlines()[-3:]
    oom = any(k in proc.stderr for k in ("out of memory", "can't allocate", "MemoryError",
                                         "DefaultCPUAllocator", "OutOfMemoryError"))  # fmt: skip
    why = "out of memory" if oom or proc.returncode in (-9, 137) else f"exit {proc.returncode}"
    print(f"[{path} {tokens}] failed: {why}\n  " + "\n  ".join(tail), file=sys.stderr)
    return {"path": path, "tokens": tokens, "failed": why}


def table(rows: list[dict]) -> str:
    by = {(r["path"], r["tokens"]): r for r in rows}
    lengths = sorted({r["tokens"] for r in rows})
    cuda = any("mfu" in r for r in rows)

    def cell(r: dict | None, key: str, fmt: str) -> str:
        if r is None:
            return "not run"
        if "failed" in r:
            return r["failed"]
        if key not in r:
            return "-"
        return format(r[key], fmt)

    head = "| tokens | today: peak over setup (GiB) | today: tokens/s "
    head += "| chunked: peak over setup (GiB) | chunked: tokens/s | peak ratio | speed ratio |"
    head += " today: tokens/CPU-s | chunked: tokens/CPU-s |"
    if cuda:
        head += " today: MFU | chunked: MFU |"
    lines = [head, "|" + "---:|" * (head.count("|") - 1)]
    for n in lengths:
        old, new = by.get(("today", n)), by.get(("chunked", n))
        both = old and new and "failed" not in old and "failed" not in new
        ratio = f"{new['peak_over_setup_gib'] / old['peak_over_setup_gib']:.3f}" if both else "-"
        speed = f"{new['tokens_per_s'] / old['tokens_per_s']:.2f}" if both else "-"
        line = (
            f"| {n} | {cell(old, 'peak_over_setup_gib', '.2f')} | {cell(old, 'tokens_per_s', '.0f')} "
            f"| {cell(new, 'peak_over_setup_gib', '.2f')} | {cell(new, 'tokens_per_s', '.0f')} "
            f"| {ratio} | {speed} | {cell(old, 'tokens_per_cpu_s', '.0f')} "
            f"| {cell(new, 'tokens_per_cpu_s', '.0f')} |"
        )
        if cuda:
            line += f" {cell(old, 'mfu', '.1%')} | {cell(new, 'mfu', '.1%')} |"
        lines.append(line)
    return "\n".join(lines)


def longest(args, path: str) -> list[dict]:
    """Double T from 8,192 until an update fails; the rows of every attempt."""
    out, n = [], 8192
    while n <= 1 << 20:
        row = run_point(args, path, n)
        out.append(row)
        if "failed" in row:
            break
        n *= 2
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        torch.set_num_threads(args.threads)
        from gspo_agents.learner.parallel import run_then_exit

        run_then_exit(lambda: worker(args))
    if args.table_from:
        print(table([r for f in args.table_from for r in json.loads(Path(f).read_text())]))
        return
    if args.warmup is None:
        args.warmup = int(args.device == "cuda")
    shape = args.shape or ("qwen3-1.7b" if args.device == "cuda" else "vocab151k-2x64")
    args.model = write_random_model(shape)
    if args.mem_limit_gib is None:
        args.mem_limit_gib = round(0.7 * _mem_available_gib(), 1)
    rows = []
    points = [
        (path, n)
        for path in args.paths
        for n in args.tokens or DEFAULT_TOKENS
        if not (path == "today" and args.skip_today_above and n > args.skip_today_above)
    ]
    progress = BenchProgress(
        "paths" if args.longest else "points", len(args.paths) if args.longest else len(points)
    )
    progress.tick(0)
    if args.longest:
        for path in args.paths:
            rows += longest(args, path)
            progress.tick()
    else:
        for path, n in points:
            rows.append(run_point(args, path, n))
            progress.tick()
    load = os.getloadavg()[0]
    print(
        f"model: {shape} ({args.model})  device: {args.device}  rows/update: {args.rows}  "
        f"chunk: {args.chunk}  torch {torch.__version__}  threads/worker: {args.threads}  "
        f"cores: {os.cpu_count()}  load average: {load:.1f}  "
        f"worker memory limit: {args.mem_limit_gib} GiB"
    )
    print(table(rows))
    if args.longest:
        for path in args.paths:
            ok = [r["tokens"] for r in rows if r["path"] == path and "failed" not in r]
            print(f"longest trajectory that trains ({path}): {max(ok) if ok else 'none'} tokens")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
