"""The TRL side of `benchmarks/end_to_end.py`: GRPOTrainer with GSPO settings on the same work.

One of our training steps = one TRL generation cycle: `steps_per_generation` optimizer steps of
per_device_train_batch_size T*G/steps, gradient_accumulation_steps 1, so each cycle generates
T*G completions once (plain HF generate on CPU, no vLLM) and makes that many updates.

Rewards come from the workload's own env:
- arithmetic: a sync reward function calls `ArithmeticEnv.step` per completion.
- codeforces: an async reward function (TRL gathers async reward functions on its own event-loop
  thread) judges ALL completions of the batch concurrently, `asyncio.gather` over
  `CodeforcesEnv.astep`, on one shared `sandbox.Sandbox` (docker backend, the same
  max_concurrency as ours). That is the best a TRL user can do with our sandbox: the judge still
  waits for the whole batch's generation, and the update waits for the judge (TRL's design).
  A judge infrastructure error returns None (TRL: NaN, left out of the advantages).

Where the time goes is measured by wrapping TRL's own methods: `_generate` (generation),
`_get_per_token_logps_and_entropies` under no_grad (the old-logprob forward TRL makes because
gradient_accumulation_steps % steps_per_generation != 0), `_calculate_rewards` (reward),
`training_step` minus the generation it triggers (forward + backward), and the rest of the cycle
(optimizer steps, scheduler, logging).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import defaultdict

from e2e_common import (
    CpuClock,
    JudgeCounter,
    emit,
    make_env,
    mean,
    step_progress,
    step_tasks,
    summary,
)


def reward_function(args, schedule: list[dict], judge: dict, batch_rewards: list[float]):
    """The workload's reward function in TRL's signature; `task_index` picks the task row.
    Appends each batch's mean reward to `batch_rewards`."""
    if args.env == "arithmetic":
        env = make_env(args)

        def arithmetic_reward(completions, task_index, **_):
            """envs.arithmetic's own judgement of each completion."""
            out = []
            for completion, i in zip(completions, task_index):
                env.reset(options={"task": schedule[i]})
                out.append(env.step(_text(completion))[1])
            batch_rewards.append(mean(out))
            return out

        return arithmetic_reward

    async def codeforces_reward(completions, task_index, **_):
        """Every completion of the batch judged at once on the shared sandbox."""
        if judge.get("sandbox") is None:  # created on TRL's event loop, where it is used
            from sandbox import Sandbox

            judge["sandbox"] = Sandbox.create("docker", max_concurrency=args.sandbox_concurrency)

        async def one(completion, i):
            env = make_env(args, judge["sandbox"])
            env.reset(options={"task": schedule[i]})
            try:
                return (await env.astep(_text(completion)))[1]
            except Exception:  # noqa: BLE001 - InfraError: not the model's fault, not a 0
                judge["errors"] = judge.get("errors", 0) + 1
                return None

        out = await asyncio.gather(*(one(c, i) for c, i in zip(completions, task_index)))
        batch_rewards.append(mean(r for r in out if r is not None))
        return list(out)

    return codeforces_reward


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def grpo_config(args, cycles: int):
    from trl import GRPOConfig

    n = args.num_minibatches
    return GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="e2e-trl-"),
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        per_device_train_batch_size=args.tasks_per_step * args.group_size // n,
        gradient_accumulation_steps=1,
        steps_per_generation=n,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        importance_sampling_level="sequence",
        loss_type="grpo",
        epsilon=3e-4,
        epsilon_high=4e-4,
        beta=0.0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=cycles * n,
        shuffle_dataset=False,  # our task order, step by step
        dataloader_num_workers=0,
        gradient_checkpointing=False,  # ours recomputes nothing either
        seed=args.seed,
    )


def timed_trainer_class(n: int, cycles: int, phases: dict, tokens: list):
    """GRPOTrainer whose phases add their seconds into `phases[name][cycle]`."""
    import torch
    from trl import GRPOTrainer

    def timed(name, method):
        def wrapper(self, *a, **k):
            started = time.perf_counter()
            try:
                return method(self, *a, **k)
            finally:
                phases[name][self._cycle()] += time.perf_counter() - started

        return wrapper

    class TimedGRPO(GRPOTrainer):
        def _cycle(self) -> int:
            return min(self.state.global_step // n, cycles - 1)

        def _generate(self, prompts):
            out = timed("generate", GRPOTrainer._generate)(self, prompts)
            tokens[self._cycle()] += sum(len(ids) for ids in out[1])
            return out

        _calculate_rewards = timed("reward", GRPOTrainer._calculate_rewards)
        _generate_and_score_completions = timed(
            "_rollout_total", GRPOTrainer._generate_and_score_completions
        )
        training_step = timed("_training_step", GRPOTrainer.training_step)

        def _get_per_token_logps_and_entropies(self, *a, **k):
            if torch.is_grad_enabled():  # the loss's own forward, inside training_step
                return super()._get_per_token_logps_and_entropies(*a, **k)
            return timed("old_logprob_fwd", GRPOTrainer._get_per_token_logps_and_entropies)(
                self, *a, **k
            )

    return TimedGRPO


def worker_trl(args) -> None:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    env = make_env(args)
    schedule = [task for tasks in step_tasks(args) for task in tasks]
    data = Dataset.from_dict(
        {
            "prompt": [env.reset(options={"task": t})[0] for t in schedule],  # chat messages
            "task_index": list(range(len(schedule))),
        }
    )
    n, cycles = args.num_minibatches, args.warmup + args.steps
    clock, judge, counter = CpuClock(), {}, JudgeCounter()
    counter.install()
    phases = defaultdict(lambda: [0.0] * cycles)
    tokens, judge_runs = [0] * cycles, [0] * cycles
    batch_rewards: list[float] = []
    progress = step_progress(args, "trl", cycles)

    class CycleClock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            clock.mark()

        def on_step_end(self, a, state, *_, **k):
            if state.global_step % n == 0:  # the last optimizer step of a generation cycle
                clock.mark()
                judge_runs[state.global_step // n - 1] = counter.runs - sum(judge_runs)
                progress.tick(state.global_step // n)

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    trainer = timed_trainer_class(n, cycles, phases, tokens)(
        model=model,
        reward_funcs=reward_function(args, schedule, judge, batch_rewards),
        args=grpo_config(args, cycles),
        train_dataset=data,
        processing_class=tok,
        callbacks=[CycleClock()],
    )
    try:
        trainer.train()
    finally:
        if judge.get("sandbox") is not None:
            asyncio.run_coroutine_threadsafe(judge["sandbox"].aclose(), trainer.async_loop).result()
    intervals = clock.intervals(args.warmup)
    w = args.warmup
    rollout = [g + r for g, r in zip(phases["generate"][w:], phases["reward"][w:])]
    emit(
        summary(
            f"TRL {trl.__version__} GRPOTrainer (seq-level, HF generate)",
            [x for x, _ in intervals],
            [c for _, c in intervals],
            rollout_s=rollout,
            update_s=[],
            completion_tokens=tokens[w:],
            rewards=batch_rewards[w:],
            trained_seqs=[float(args.tasks_per_step * args.group_size)] * args.steps,
        )
        | {
            "judge_runs_per_step": mean(judge_runs[w:]),
            "judge_errors": judge.get("errors", 0),
            "phases_s_per_step": trl_phases(phases, [x for x, _ in intervals], w),
        }
    )


def trl_phases(phases: dict, walls: list[float], warmup: int) -> dict[str, float]:
    """Seconds per timed cycle: generate, old-logprob forward, reward, the rest of scoring,
    training forward+backward, and the rest of the cycle (optimizer, scheduler, logging)."""
    per = {k: mean(v[warmup:]) for k, v in phases.items()}
    rollout_total = per.pop("_rollout_total", 0.0)
    training_step = per.pop("_training_step", 0.0)
    out = {k: per.get(k, 0.0) for k in ("generate", "old_logprob_fwd", "reward")}
    out["score_other"] = rollout_total - sum(out.values())
    out["train_fwd_bwd"] = training_step - rollout_total  # training_step triggers the rollout
    out["optimizer_and_rest"] = mean(walls) - training_step
    return out
