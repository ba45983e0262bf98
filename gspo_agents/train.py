"""`python -m gspo_agents.train [env=...] [model=...] [engine=...] [key=value ...]`

The whole training run, wired in plain sight: build the pieces, loop (collect groups of
trajectories → advantages → GSPO update → push weights to the engine → log), close.
The rollout side and the learner never import each other; weights cross as an HF directory.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gspo_agents.batching import has_signal, prepare_batch, tasks_for_step
from gspo_agents.config import CONFIG_DIR, check_choices, register_schemas
from gspo_agents.tracking import RunTracker, drop_rows_after

CONSOLE_KEYS = ["reward_mean", "loss", "clip_frac_tokens", "ratio_max", "grad_norm", "step_time_s"]


def build_env_factory(cfg: DictConfig, sandbox):
    import envs

    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    extra = {"sandbox": sandbox} if sandbox is not None else {}

    def factory():
        return envs.make(cfg.env.name, **kwargs, **extra)

    return factory


def build_sandbox(cfg: DictConfig, env_name: str):
    """Only environments that run code get a sandbox; math and arithmetic do not need one."""
    if env_name not in ("codeforces", "mathtool") and "Codeforces" not in env_name:
        return None
    from sandbox import Sandbox

    return Sandbox.create(
        cfg.sandbox.backend,
        max_concurrency=cfg.sandbox.max_concurrency,
        allow_unsafe_local=cfg.sandbox.allow_unsafe_local,
    )


def build_engine(cfg: DictConfig, model_dir: str, seed: int):
    if cfg.engine.kind == "local":
        from gspo_agents.rollout.local_engine import LocalEngine

        return LocalEngine(
            model_dir, max_batch_size=cfg.engine.max_batch_size, seed=seed, dtype=cfg.engine.dtype
        )
    from gspo_agents.rollout.sglang_engine import SGLangEngine

    return SGLangEngine(
        list(cfg.engine.urls),
        connect_timeout_s=cfg.engine.connect_timeout_s,
        request_timeout_s=cfg.engine.request_timeout_s,
    )


async def check_engine_answers(cfg: DictConfig) -> None:
    """Fail in seconds, naming the URLs, when no engine worker answers; otherwise every
    trajectory of every step would quietly end as an engine error."""
    engine = build_engine(cfg, "", cfg.trainer.seed)
    try:
        healthy = await engine.health()
    finally:
        await engine.close()
    if not healthy:
        raise RuntimeError(
            f"no SGLang worker answers at engine.urls={list(cfg.engine.urls)} (GET /health "
            f"within engine.connect_timeout_s={cfg.engine.connect_timeout_s}); start them with "
            "`python -m sglang.launch_server --model-path ... --port ...` (or "
            "`python -m gspo_agents.serve` on CPU) or fix engine.urls"
        )


def build_learner(cfg: DictConfig, model_dir: str):
    from gspo_agents.learner import Learner, LearnerConfig

    t, a = cfg.trainer, cfg.algorithm
    learner_cfg = LearnerConfig(
        algorithm=a.name,
        eps_low=a.eps_low,
        eps_high=a.eps_high,
        lr=t.lr,
        weight_decay=t.weight_decay,
        warmup_steps=t.warmup_steps,
        max_grad_norm=t.max_grad_norm,
        num_minibatches=t.num_minibatches,
        micro_batch_tokens=t.micro_batch_tokens,
        share_prompt_prefix=t.share_prompt_prefix,
        temperature=cfg.rollout.temperature,
        seed=t.seed,
        loss_agg=a.loss_agg,
        old_logprobs=a.old_logprobs,
        seq_is_cap=a.seq_is_cap,
        seq_mask_bound=a.seq_mask_bound,
        routing_replay=a.routing_replay,
    )
    return Learner(model_dir, learner_cfg)


def resolve_start_model(cfg: DictConfig, env) -> str:
    from gspo_agents.models import ModelConfig, resolve_model
    from gspo_agents.sft import ensure_cold_start

    model_dir = resolve_model(ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True)))
    if cfg.trainer.sft.enabled and cfg.model.name != "hf":
        model_dir = ensure_cold_start(
            model_dir,
            env,
            cfg.env.name,
            OmegaConf.to_container(cfg.env.kwargs, resolve=True),
            OmegaConf.to_container(cfg.trainer.sft, resolve=True),
            train_split=cfg.env.train_split,
            seed=cfg.trainer.seed,
        )
    return model_dir


async def training_loop(cfg, learner, manager, tasks, tracker, run_dir: Path, start_step: int):
    """Consumes task rows; produces one optimizer update per step and fresh engine weights.

    Waits on the rollout manager (generation + env steps) and then on the learner; a SIGTERM
    sets `stop` and the loop ends after the current step with a checkpoint.
    """
    t = cfg.trainer
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    step = start_step
    try:
        if t.async_rollouts:  # generation of step k+1 overlaps the update of step k
            manager.start_prefetch(tasks_for_step(tasks, start_step, t.tasks_per_step, t.seed))
        for step in range(start_step, t.steps):
            if stop.is_set():
                break
            started = loop.time()
            if t.async_rollouts:
                result = await manager.next_batch()
                if step + 1 < t.steps:
                    manager.start_prefetch(
                        tasks_for_step(tasks, step + 1, t.tasks_per_step, t.seed)
                    )
            else:
                result = await manager.collect(
                    tasks_for_step(tasks, step, t.tasks_per_step, t.seed)
                )
            metrics = dict(result.metrics)
            groups = result.groups
            if cfg.algorithm.dynamic_sampling_rounds:
                groups = await refill_groups(cfg, manager, tasks, step, groups, metrics)
            a = cfg.algorithm
            prepared = prepare_batch(
                groups,
                pad_id=learner.pad_token_id,
                filter_zero_spread=a.filter_zero_spread_groups,
                per_turn=a.name == "gspo_token",
                turn_discount=a.turn_discount,
                normalize_std=a.normalize_std,
                overlong_filter=a.overlong_filter,
                overlong_penalty=a.overlong_penalty,
            )
            metrics.update(prepared.metrics)
            if prepared.batch is not None:
                metrics.update(await asyncio.to_thread(learner.update, prepared.batch))
                weights = await asyncio.to_thread(
                    learner.export_hf, str(run_dir / "weights" / f"step{step + 1}")
                )
                await manager.update_weights(weights, version=step + 1)
                _keep_latest(run_dir / "weights", Path(weights).name)
            metrics["step_time_s"] = loop.time() - started
            tracker.log(step + 1, metrics)
            tracker.console(step + 1, metrics, CONSOLE_KEYS)
            if t.save_every_steps and (step + 1) % t.save_every_steps == 0:
                learner.save_checkpoint(str(run_dir / "checkpoint"), {"step": step + 1})
        else:
            step = t.steps
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    learner.save_checkpoint(str(run_dir / "checkpoint"), {"step": step})
    final = run_dir / "weights" / f"step{step}"
    if not final.exists():  # the last step may have had no signal: export what we have
        learner.export_hf(str(final))
        _keep_latest(run_dir / "weights", final.name)
    return step


async def refill_groups(cfg, manager, tasks, step: int, groups: list, metrics: dict) -> list:
    """Dynamic sampling (DAPO): replace groups without reward spread by groups of further tasks,
    for at most `algorithm.dynamic_sampling_rounds` extra rollout rounds. The extra tasks are a
    function of (step, round, seed), so a resumed run draws the same ones."""
    t, a = cfg.trainer, cfg.algorithm
    per_turn = a.name == "gspo_token"

    def signal(g) -> bool:
        return has_signal(g, per_turn=per_turn, turn_discount=a.turn_discount)

    kept = [g for g in groups if signal(g)]
    metrics["zero_spread_frac_before_refill"] = 1.0 - len(kept) / max(len(groups), 1)
    rounds = 0
    while len(kept) < t.tasks_per_step and rounds < a.dynamic_sampling_rounds:
        rounds += 1
        need = t.tasks_per_step - len(kept)
        more = await manager.collect(tasks_for_step(tasks, step, need, t.seed + 7919 * rounds))
        kept += [g for g in more.groups if signal(g)]
    metrics["refill_rounds"] = float(rounds)
    return kept[: t.tasks_per_step] if kept else groups


def quiet_libraries() -> None:
    """Our console line is the progress display; silence per-load progress bars."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.disable_progress_bar()


def _keep_latest(weights_root: Path, keep: str) -> None:
    for child in weights_root.iterdir():
        if child.name != keep:
            shutil.rmtree(child, ignore_errors=True)


def run(cfg: DictConfig) -> dict:
    import envs
    from gspo_agents.learner.parallel import broadcast_object, close_process, init_process
    from gspo_agents.learner_group import LearnerGroup, follow
    from gspo_agents.models import load_tokenizer
    from gspo_agents.rollout.manager import RolloutConfig, RolloutManager

    check_choices(cfg)
    if cfg.engine.kind == "sglang":
        asyncio.run(check_engine_answers(cfg))  # before minutes of cold start, not after
    t = cfg.trainer
    random.seed(t.seed)
    run_dir = Path(t.run_dir)
    process = init_process()  # joins torchrun's process group; a no-op for one process
    env = envs.make(cfg.env.name, **OmegaConf.to_container(cfg.env.kwargs, resolve=True))
    tasks = env.load_tasks(cfg.env.train_split)[: cfg.env.max_train_tasks or None]
    model_dir = resolve_start_model(cfg, env) if process.rank == 0 else None
    model_dir = broadcast_object(model_dir, process)  # followers wait here while rank 0 cold-starts
    learner = build_learner(cfg, model_dir)
    if not learner.is_main:
        follow(learner)
        close_process(process)
        return {"run_dir": str(run_dir), "rank": process.rank}
    learner = LearnerGroup(learner)
    start_step = 0
    # `checkpoint.old` alone: a kill hit the swap of a new checkpoint; the loader falls back to it.
    if t.resume and any((run_dir / n).exists() for n in ("checkpoint", "checkpoint.old")):
        start_step = int(learner.load_checkpoint(str(run_dir / "checkpoint")).get("step", 0))
        drop_rows_after(run_dir, start_step)
    sandbox = build_sandbox(cfg, cfg.env.name)
    engine = build_engine(cfg, model_dir, t.seed)
    tracker = RunTracker(
        run_dir,
        config=OmegaConf.to_container(cfg, resolve=True),
        wandb_mode=cfg.logger.wandb_mode,
        wandb_project=cfg.logger.wandb_project,
        run_name=run_dir.name,
        total_steps=t.steps,
        resume=t.resume,
    )
    print(
        f"run dir: {run_dir} | model: {model_dir} | env: {cfg.env.name} ({len(tasks)} tasks)",
        file=sys.stderr,
    )
    rollout_cfg = RolloutConfig(**OmegaConf.to_container(cfg.rollout, resolve=True))
    manager = RolloutManager(
        engine, build_env_factory(cfg, sandbox), load_tokenizer(model_dir), rollout_cfg
    )

    async def main_async():
        try:
            if start_step:
                weights = learner.export_hf(str(run_dir / "weights" / f"step{start_step}"))
                await manager.update_weights(weights, version=start_step)
            return await training_loop(cfg, learner, manager, tasks, tracker, run_dir, start_step)
        finally:
            await manager.aclose()
            await engine.close()
            if sandbox is not None:
                await sandbox.aclose()

    wandb_dir = tracker.wandb_dir
    try:
        final_step = asyncio.run(main_async())
    finally:
        tracker.close()
        learner.close()
        close_process(process)
    return {"run_dir": str(run_dir), "final_step": final_step, "wandb_dir": wandb_dir}


register_schemas()


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    quiet_libraries()
    if cfg.trainer.nproc > 1 and "RANK" not in os.environ:
        from gspo_agents.learner_group import relaunch_under_torchrun

        sys.exit(relaunch_under_torchrun(cfg.trainer.nproc, sys.argv[1:]))
    summary = run(cfg)
    print(f"done: {summary}", file=sys.stderr)


if __name__ == "__main__":
    main()
