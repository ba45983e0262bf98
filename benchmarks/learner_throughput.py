"""Learner throughput: update tokens/s of our GSPO minibatch step against a floor and a peer.

One run, one table, all on the same model (the project's `tiny` Qwen3), the same shape of work
(B sequences of prompt + completion tokens, split into 4 minibatches = 4 optimizer steps):

- ours, 1 process   : `Learner.update` (GSPO, eps 3e-4 / 4e-4), all cores in one process
- ours, N processes : the same under torchrun / FSDP2 (gloo on CPU), one core per process
- floor             : a bare forward + backward (plain LM cross-entropy) + AdamW step per minibatch,
                      same model, same tokens: what any trainer must at least spend. Its
                      cross-entropy goes through the same chunked output layer as ours
                      (`TokenHead`, `logprob_chunk_tokens`), not through full [T, V] logits, so
                      the two differ by the GSPO bookkeeping only
- TRL               : GRPOTrainer (importance_sampling_level="sequence", loss_type="grpo",
                      epsilon 3e-4 / epsilon_high 4e-4, steps_per_generation 4, beta 0), completions
                      forced to the same length; its optimizer steps are timed with generation (and
                      the old-log-prob pass inside it) subtracted

    python benchmarks/learner_throughput.py              # prints the table (add --json out.json)
    pip install -e '.[bench]'                            # TRL is optional, only for the peer row

Timing: one warm-up update, then the fastest of --repeats updates (wall and CPU seconds
separately); ours and the floor alternate in one process so that both see the same machine load.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from gspo_agents.tracking import BenchProgress

RESULT = "RESULT "

# Published shapes of the Qwen3 family (their config.json), built here with random weights: enough
# to measure speed and memory, which do not depend on the weights.
RANDOM_SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    # Qwen3's vocabulary on a CPU-sized body: the output layer dominates (learner_memory.py)
    "vocab151k-2x64": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           tie_word_embeddings=True),
}  # fmt: skip


def write_random_model(shape: str) -> str:
    """A random-init Qwen3 of `shape` (bf16 safetensors) under the cache dir; reused if present."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    out = Path("~/.cache/gspo-agents/bench-models").expanduser() / shape
    if (out / "config.json").exists():
        return str(out)
    config = Qwen3Config(
        vocab_size=151936, max_position_embeddings=131072, rope_theta=1_000_000,
        rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151645,
        **{"head_dim": 128, **RANDOM_SHAPES[shape]},
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tmp.rename(out)
    return str(out)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--worker", choices=["ours", "floor", "trl"], default=None, help=argparse.SUPPRESS
    )
    p.add_argument("--model", default=None, help="HF directory (default: the project's tiny model)")
    p.add_argument(
        "--random-model",
        choices=sorted(RANDOM_SHAPES),
        default=None,
        help="write a randomly initialised model of a published Qwen3 shape (no download), print "
        "its directory and exit; pass that directory as --model",
    )
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=0,
        help="tokens per forward/backward (0: a whole minibatch at once)",
    )
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per rollout batch")
    p.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--completion-tokens", type=int, default=96)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5, help="timed updates; the fastest counts")
    p.add_argument("--nproc", type=int, default=2, help="processes for the multi-process row")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--json", default=None, help="also write the rows here")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------
# shared work
# --------------------------------------------------------------------------------------------
def tiny_model_dir() -> str:
    from gspo_agents.models import ModelConfig, resolve_model

    return resolve_model(ModelConfig(name="tiny"))


def make_batch(args, vocab_size: int, seed: int = 0):
    """B full-length rows: prompt then completion; per-sequence group advantages."""
    from gspo_agents.objectives import group_advantages
    from gspo_agents.trajectory import FlatBatch

    g = torch.Generator().manual_seed(seed)
    B, P, C = args.batch_size, args.prompt_tokens, args.completion_tokens
    ids = torch.randint(3, vocab_size, (B, P + C), generator=g)
    attn = torch.ones(B, P + C, dtype=torch.long)
    mask = torch.zeros(B, P + C)
    mask[:, P:] = 1.0
    rewards = torch.rand(B, generator=g)
    adv = group_advantages(rewards, [i // args.group_size for i in range(B)]).advantages_B
    versions = torch.where(mask.bool(), 0, -1)
    return FlatBatch(ids, attn, mask, torch.zeros(B, P + C), adv[:, None] * mask, versions)


def emit(row: dict) -> None:
    print(RESULT + json.dumps(row), flush=True)


class Clock:
    """Wall and CPU seconds of this process. On a shared machine CPU seconds are the fairer
    measure for single-threaded runs: other people's jobs stretch the wall clock, not our CPU time."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def _best(times: list[tuple[float, float]]) -> tuple[float, float]:
    """Fastest repeat (wall, CPU): the least disturbed by other jobs on a shared machine."""
    return min(t[0] for t in times), min(t[1] for t in times)


# --------------------------------------------------------------------------------------------
# workers
# --------------------------------------------------------------------------------------------
def worker_ours(args) -> None:
    """Our update; in a single CPU process also the floor, alternating with ours under equal load."""
    from gspo_agents.learner import Learner, LearnerConfig

    cfg = LearnerConfig(
        algorithm="gspo",
        lr=1e-5,
        num_minibatches=args.num_minibatches,
        micro_batch_tokens=args.micro_batch_tokens
        or args.batch_size * (args.prompt_tokens + args.completion_tokens),
        activation_checkpointing=args.activation_checkpointing,
    )
    learner = Learner(args.model, cfg)
    batch = make_batch(args, learner.model.config.vocab_size)
    floor, peak_gib = None, None  # the floor's model is loaded after ours' first update
    ours_t, floor_t, metrics = [], [], {}
    rounds = 1 + args.repeats
    progress = BenchProgress(f"ours x{learner.world_size}, updates", rounds)
    for i in range(rounds):  # the first round is the warm-up
        if learner.is_main:
            progress.tick(i)
        b = replace(batch, old_logprobs_BT=learner.compute_logprobs(batch) * batch.loss_mask_BT)
        clock = Clock()  # the engine's log-probs above are not part of the update
        metrics = learner.update(b)
        ours_t.append(clock.elapsed())
        if i == 0 and learner.device.type == "cuda":  # ours alone: no floor model resident yet
            peak_gib = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if i == 0 and learner.world_size == 1:
            floor = make_floor(args, batch, learner)
        if floor is not None:
            clock = Clock()
            floor()
            floor_t.append(clock.elapsed())
    if learner.is_main:
        progress.tick(rounds)
        name = f"ours (GSPO, {learner.world_size} proc)"
        row = _row(name, learner.world_size, args, *_best(ours_t[1:]))
        row.update(device=str(learner.device), skipped_steps=metrics["skipped_steps"])
        row["params"] = sum(p.numel() for p in learner.model.parameters())
        # model FLOPs of a training step, 6 x parameters x tokens (attention scores not counted)
        flops = 6 * row["params"] * row["tokens_per_update"]
        row["model_tflops"] = round(flops / row["s_per_update"] / 1e12, 2)
        if learner.device.type == "cuda":
            row["bf16"] = learner.cfg.mixed_precision
            row["max_mem_gib"] = peak_gib
            row["gpu"] = torch.cuda.get_device_name(learner.device)
        emit(row)
        if floor_t:
            emit(_row("floor (fwd+bwd+AdamW)", 1, args, *_best(floor_t[1:])))
    learner.close()


def make_floor(args, batch, learner):
    """A bare training step on the same tokens, device and precision as the learner (fp32 master
    weights, bf16 autocast on CUDA): LM cross-entropy through the learner's chunked output
    layer, forward, backward, AdamW step."""
    from transformers import AutoModelForCausalLM

    from gspo_agents.learner.batching import split_minibatches
    from gspo_agents.learner.head import TokenHead

    device = learner.device
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device)
    model.config.use_cache = False
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    bf16 = device.type == "cuda" and learner.cfg.mixed_precision != "fp32"

    seq_len = batch.input_ids_BT.shape[1]
    rows_per_micro = max(1, args.micro_batch_tokens // seq_len) if args.micro_batch_tokens else None

    head = TokenHead(model, 1.0, learner.cfg.logprob_chunk_tokens)

    def update() -> None:
        for rows in split_minibatches(batch.num_sequences, args.num_minibatches):
            rows = torch.as_tensor(rows)
            for micro in rows.split(rows_per_micro or len(rows)):  # gradient accumulation
                ids = batch.input_ids_BT[micro].to(device)
                attn = batch.attention_mask_BT[micro].to(device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    lp_BT = head(ids, attention_mask=attn).logprobs_BT
                nll = -(lp_BT[:, 1:] * attn[:, 1:]).sum() / attn[:, 1:].sum()
                (nll * len(micro) / len(rows)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return update


def worker_trl(args) -> None:
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    prompts = exact_length_prompts(tok, args.prompt_tokens, count=64)
    steps_per_generation = args.num_minibatches
    per_step = args.batch_size // steps_per_generation
    cycles = 1 + args.repeats  # the first generation cycle is the warm-up
    config = GRPOConfig(
        output_dir="/tmp/trl-bench",
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=10_000,
        disable_tqdm=True,  # our progress line instead
        per_device_train_batch_size=per_step,
        gradient_accumulation_steps=1,
        steps_per_generation=steps_per_generation,
        num_generations=args.group_size,
        max_completion_length=args.completion_tokens,
        generation_kwargs={"min_new_tokens": args.completion_tokens},
        importance_sampling_level="sequence",
        loss_type="grpo",
        epsilon=3e-4,
        epsilon_high=4e-4,
        beta=0.0,
        learning_rate=1e-5,
        max_steps=cycles * steps_per_generation,
        dataloader_num_workers=0,
        gradient_checkpointing=False,  # ours recomputes nothing either
        seed=0,
    )

    class StepTimer(TrainerCallback):
        """Wall and CPU time of each optimizer step, minus the generation inside it."""

        def __init__(self) -> None:
            self.steps: list[tuple[float, float]] = []
            self.generation = (0.0, 0.0)

        def on_step_begin(self, *a, **k):
            self.generation, self.clock = (0.0, 0.0), Clock()

        def on_step_end(self, *a, **k):
            wall, cpu = self.clock.elapsed()
            self.steps.append((wall - self.generation[0], cpu - self.generation[1]))
            progress.tick(len(self.steps))

    progress = BenchProgress("TRL, optimizer steps", config.max_steps)
    timer = StepTimer()

    class TimedGRPO(GRPOTrainer):
        def _generate_and_score_completions(self, *a, **k):
            clock = Clock()
            try:
                return super()._generate_and_score_completions(*a, **k)
            finally:
                wall, cpu = clock.elapsed()
                timer.generation = (timer.generation[0] + wall, timer.generation[1] + cpu)

    def reward(completions, **kw):
        return [float(len(str(c)) % 7) for c in completions]  # any spread; speed only

    data = Dataset.from_dict({"prompt": prompts})
    trainer = TimedGRPO(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tok,
        callbacks=[timer],
    )
    trainer.train()
    n = steps_per_generation
    per_cycle = [  # one cycle = one rollout batch = `n` optimizer steps; the first is warm-up
        (sum(w for w, _ in timer.steps[i : i + n]), sum(c for _, c in timer.steps[i : i + n]))
        for i in range(n, len(timer.steps), n)
    ]
    name = f"TRL {trl.__version__} GRPOTrainer (seq-level)"
    emit(_row(name, 1, args, *_best(per_cycle)))


def exact_length_prompts(tok, num_tokens: int, count: int) -> list[str]:
    """Random texts that re-tokenize to exactly `num_tokens` ids, so TRL trains on our token count."""
    g = torch.Generator().manual_seed(0)
    prompts: list[str] = []
    while len(prompts) < count:
        ids = torch.randint(3, len(tok), (num_tokens,), generator=g).tolist()
        for _ in range(20):  # decode/encode until the length is a fixed point
            text = tok.decode(ids[:num_tokens], skip_special_tokens=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            if len(ids) == num_tokens:
                prompts.append(text)
                break
            if len(ids) < num_tokens:
                ids = (
                    ids + torch.randint(3, len(tok), (num_tokens - len(ids),), generator=g).tolist()
                )
    return prompts


def _row(name: str, nproc: int, args, wall_s: float, cpu_s: float) -> dict:
    tokens = args.batch_size * (args.prompt_tokens + args.completion_tokens)
    return {
        "run": name,
        "procs": nproc,
        "tokens_per_update": tokens,
        "s_per_update": round(wall_s, 4),
        "tokens_per_s": round(tokens / wall_s, 1),
        # rank 0's CPU seconds; with one thread per process, the per-core cost
        "cpu_s_per_update": round(cpu_s, 4),
        "tokens_per_cpu_s": round(tokens / cpu_s, 1),
    }


# --------------------------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------------------------
def run_worker(kind: str, args, nproc: int = 1) -> list[dict]:
    flags = [
        "--worker", kind, "--model", args.model, "--batch-size", str(args.batch_size),
        "--group-size", str(args.group_size), "--prompt-tokens", str(args.prompt_tokens),
        "--completion-tokens", str(args.completion_tokens),
        "--num-minibatches", str(args.num_minibatches), "--repeats", str(args.repeats),
        "--threads", str(args.threads), "--micro-batch-tokens", str(args.micro_batch_tokens),
    ]  # fmt: skip
    if args.activation_checkpointing:
        flags.append("--activation-checkpointing")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", __file__, *flags]  # fmt: skip
    else:
        cmd = [sys.executable, __file__, *flags]
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(key, None)
    print(f"[{kind} x{nproc}] starting", file=sys.stderr, flush=True)
    # stderr passes through: the worker's progress lines and, on failure, its traceback
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    rows = [json.loads(x[len(RESULT) :]) for x in proc.stdout.splitlines() if x.startswith(RESULT)]
    if rows:
        return rows
    print(
        f"[{kind} x{nproc}] failed (exit {proc.returncode}; its output is above)", file=sys.stderr
    )
    return []


def table(rows: list[dict]) -> str:
    floor = next((r for r in rows if r["run"].startswith("floor")), None)
    lines = [
        "| run | procs | tokens/update | s/update (wall) | update tokens/s (wall) "
        "| tokens per CPU-s (rank 0) | vs floor (wall) | vs floor (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        wall = f"{r['tokens_per_s'] / floor['tokens_per_s']:.0%}" if floor else "-"
        cpu = f"{r['tokens_per_cpu_s'] / floor['tokens_per_cpu_s']:.0%}" if floor else "-"
        lines.append(
            f"| {r['run']} | {r['procs']} | {r['tokens_per_update']} | {r['s_per_update']:.3f} "
            f"| {r['tokens_per_s']:.0f} | {r['tokens_per_cpu_s']:.0f} | {wall} | {cpu} |"
        )
    return "\n".join(lines)


def with_trl(args) -> bool:
    if args.skip_trl:
        return False
    try:
        import trl  # noqa: F401
    except ImportError:
        print(
            "TRL not installed (pip install -e '.[bench]'); skipping the peer row", file=sys.stderr
        )
        return False
    return True


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.random_model:
        print(write_random_model(args.random_model))
        return
    if args.model is None:
        args.model = tiny_model_dir()
    if args.worker:
        torch.set_num_threads(args.threads)
        if args.worker == "ours":  # a torchrun worker: see run_then_exit
            from gspo_agents.learner.parallel import run_then_exit

            run_then_exit(lambda: worker_ours(args))
        worker_trl(args)
        return
    runs = [("ours", 1), ("ours", args.nproc)] + ([("trl", 1)] if with_trl(args) else [])
    progress = BenchProgress("learner_throughput, runs", len(runs))
    rows = []
    for kind, nproc in runs:
        rows += run_worker(kind, args, nproc=nproc)
        progress.tick()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"model: {args.model}  torch {torch.__version__}  cores: {os.cpu_count()}  "
        f"threads/process: {args.threads}  load average: {load:.1f}"
    )
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
