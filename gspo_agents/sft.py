"""Cold-start supervised fine-tuning on an environment's reference answers.

The GSPO paper starts RL from a cold-start fine-tune; a randomly initialised tiny model would
otherwise never produce a rewarded answer. This stage trains on (prompt, reference response) pairs
from the env's training split, with the loss on response tokens only, and caches the result by a
hash of everything that determines it, so a second run reuses it.

Run it alone with `python -m gspo_agents.sft env=arithmetic`; `train` runs it automatically when
`trainer.sft.enabled=true` and the model is one of the built-in tiny ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gspo_agents.tracking import Progress

if TYPE_CHECKING:
    import torch

# torch is imported where it is used: `gspo-sft` (this module's `_main`) checks its overrides
# first, so a typo is rejected without waiting for torch and transformers to load.

SFT_CACHE = "~/.cache/gspo-agents/sft"
MICRO_BATCH_TOKENS = 4096  # padded tokens per forward: bounds memory and padding waste


class NoReferenceResponses(ValueError):
    """The env gives no reference response for any task: there is nothing to cold-start on."""


def build_examples(env, tokenizer, tasks: list[dict[str, Any]], max_examples: int):
    """(prompt ids, response ids) pairs; the response ends with the end-of-turn token.

    A reference may be one answer or a list of turns (a tool call, then the answer after the
    tool's result): the env is stepped with each turn, and each turn is an example whose prompt
    is the conversation so far, as the rollouts render it."""
    from envs.tools.trajectory import references_in_format
    from gspo_agents.rollout.chat import ChatFormat
    from gspo_agents.rollout.episode import tool_schemas

    chat = ChatFormat(tokenizer)
    tools = tool_schemas(env)
    tool_format = reference_format(env)
    examples, stepped = [], False
    for task in tasks[:max_examples]:
        # written with Hermes calls; taught in the format the env parses (rollout.tool_format)
        response = references_in_format(env.reference_response(task), tool_format)
        if response is None:
            continue
        turns = [response] if isinstance(response, str) else list(response)
        messages, _ = env.reset(options={"task": task})
        for k, turn in enumerate(turns):
            # The model's turn ends with the stop token; the rest of the template's end-of-turn
            # marker belongs to the next observation, exactly as in a rollout.
            answer = tokenizer.encode(turn, add_special_tokens=False) + [chat.stop_token_ids[0]]
            examples.append((chat.prompt_ids(messages, tools=tools), answer))
            if k + 1 < len(turns):
                obs, stepped = env.step(turn)[0], True
                messages = [*messages, {"role": "assistant", "content": turn}, *obs]
    if stepped:
        env.close()  # a tool env's own event loop and session, opened by its first step
    if not examples:
        raise NoReferenceResponses(
            f"{type(env).__name__} gives no reference responses for cold-start SFT; "
            "disable it with trainer.sft.enabled=false or start from a fine-tuned model.path"
        )
    return examples


def reference_format(env) -> str:
    """The tool-call format a tool env parses (`tool_parser`); Hermes for any other env."""
    return getattr(getattr(env, "unwrapped", env), "tool_parser", None) or "hermes"


def describe_examples(examples, num_tasks: int) -> str:
    """One console line: how many examples, and their longest turn and sequence in tokens (every
    example is a whole turn: nothing is cut, so a long one shows here, not as a silent loss)."""
    answer = max(len(a) for _, a in examples)
    total = max(len(p) + len(a) for p, a in examples)
    return (
        f"cold start: {len(examples)} examples from {num_tasks} tasks, whole turns (the longest "
        f"{answer} tokens, prompt and turn up to {total} tokens)"
    )


def _batch(examples, pad_id: int):
    import torch

    length = max(len(p) + len(a) for p, a in examples)
    ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), length), -100, dtype=torch.long)
    attention = torch.zeros((len(examples), length), dtype=torch.long)
    for row, (prompt, answer) in enumerate(examples):
        seq = prompt + answer
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, len(prompt) : len(seq)] = torch.tensor(answer)
        attention[row, : len(seq)] = 1
    return ids, labels, attention


def length_buckets(examples, max_padded_tokens: int = MICRO_BATCH_TOKENS) -> list[list]:
    """Split a batch into micro-batches of similar length, so padding costs little: code answers
    vary from ~20 to ~340 tokens and one long example would otherwise pad the whole batch."""
    ordered = sorted(examples, key=lambda e: len(e[0]) + len(e[1]))
    buckets: list[list] = [[]]
    for example in ordered:
        length = len(example[0]) + len(example[1])  # the longest so far, as `ordered` is sorted
        if buckets[-1] and (len(buckets[-1]) + 1) * length > max_padded_tokens:
            buckets.append([])
        buckets[-1].append(example)
    return buckets


def _accumulate_token_mean_loss(model, batch, pad_id: int) -> torch.Tensor:
    """Backward of the mean loss over all response tokens of `batch`, one bucket at a time;
    returns that mean (detached). The same gradient as one padded batch, less padding."""
    import torch

    total = sum(len(answer) for _, answer in batch)
    loss_sum = torch.zeros(())
    for bucket in length_buckets(batch, MICRO_BATCH_TOKENS):
        ids, labels, attention = _batch(bucket, pad_id)
        tokens = sum(len(answer) for _, answer in bucket)
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        (loss * (tokens / total)).backward()
        loss_sum += loss.detach() * tokens
    return loss_sum / total


def train_sft(model, examples, *, steps: int, batch_size: int, lr: float, seed: int, log=print):
    """Plain AdamW on the response tokens; returns the loss of the last step."""
    import torch

    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / max(steps, 1))
    pad_id = model.config.pad_token_id or 0
    model.train()
    loss_value = float("nan")
    start = last_log = time.monotonic()
    progress = Progress(steps)
    for step in range(1, steps + 1):
        batch = rng.sample(examples, min(batch_size, len(examples)))
        optimizer.zero_grad(set_to_none=True)
        loss = _accumulate_token_mean_loss(model, batch, pad_id)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        eta = progress.update(step)
        now = time.monotonic()
        # every 25 steps, and at least every 10 s: a slow machine never looks hung
        if step == 1 or step % 25 == 0 or step == steps or now - last_log >= 10:
            last_log = now
            log(f"sft step {step}/{steps} | loss {loss_value:.4f} | {now - start:.0f}s | eta {eta}")
    model.eval()
    return loss_value


def cache_key(
    model_dir: str,
    env_name: str,
    env_kwargs: dict,
    sft_cfg: dict,
    seed: int,
    tool_format: str = "hermes",
) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(model_dir)):
        if name.endswith((".json", ".safetensors", ".jinja", ".txt")):
            h.update(name.encode())
            h.update(Path(model_dir, name).read_bytes())
    recipe = {"env": env_name, "kwargs": env_kwargs, "sft": sft_cfg, "seed": seed, "v": 1}
    if tool_format != "hermes":  # the Hermes keys stay what they were before formats existed
        recipe["tool_format"] = tool_format
    h.update(json.dumps(recipe, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def ensure_cold_start(
    model_dir: str,
    env,
    env_name: str,
    env_kwargs: dict,
    sft_cfg: dict,
    *,
    train_split: str = "train",
    seed: int = 0,
    cache_root: str = SFT_CACHE,
    log=lambda msg: print(msg, file=sys.stderr, flush=True),
) -> str:
    """Return the directory of the cold-started model, training it once if it is not cached."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = cache_key(model_dir, env_name, env_kwargs, sft_cfg, seed, reference_format(env))
    out = Path(cache_root).expanduser() / key
    if (out / "config.json").exists():
        log(f"cold start: reusing cached SFT model {out}")
        return str(out)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tasks = env.load_tasks(train_split)
    random.Random(seed).shuffle(tasks)
    # before the announcement: an env without reference answers gets "no cold start" alone
    examples = build_examples(env, tokenizer, tasks, sft_cfg["max_examples"])
    log(f"cold start: SFT on {env_name} reference answers ({sft_cfg['steps']} steps) -> {out}")
    log(describe_examples(examples, len(tasks[: sft_cfg["max_examples"]])))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    train_sft(
        model,
        examples,
        steps=sft_cfg["steps"],
        batch_size=sft_cfg["batch_size"],
        lr=sft_cfg["lr"],
        seed=seed,
        log=log,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{key}-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, out)  # atomic: a crash leaves no half-written cache entry
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(out)


def _main() -> None:
    import hydra
    from omegaconf import OmegaConf

    from gspo_agents.cli import run_cli, user_errors_as_one_line
    from gspo_agents.config import CONFIG_DIR, check_choices, check_overrides, register_schemas
    from gspo_agents.rundir import write_config

    register_schemas()

    @hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
    def main(cfg) -> None:
        import envs
        from gspo_agents.components import apply_tool_format, tool_format_override
        from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model

        with user_errors_as_one_line():
            check_choices(cfg)
            env_kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
            env = envs.make(cfg.env.name, **env_kwargs)
            base = resolve_model(ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True)))
            template = getattr(load_tokenizer(base), "chat_template", None)
            apply_tool_format(env, tool_format_override(cfg, env_kwargs, template))
            out = ensure_cold_start(
                base,
                env,
                cfg.env.name,
                env_kwargs,
                OmegaConf.to_container(cfg.trainer.sft, resolve=True),
                train_split=cfg.env.train_split,
                seed=cfg.trainer.seed,
            )
        # SFT's own config beside its model (a training run's config.yaml is never touched)
        write_config(Path(out) / "sft-config.yaml", cfg)
        print(out)

    run_cli(main, check_overrides)


if __name__ == "__main__":
    _main()
