"""`python -m gspo_agents.train [env=...] [model=...] [engine=...] [key=value ...]`

The whole training run, wired in plain sight: build the pieces, loop (collect groups of
trajectories → advantages → GSPO update → push weights to the engine → log), close.
The rollout side and the learner never import each other; weights cross as an HF directory.
Rank 0 runs the loop; with `rollout.drivers=all_ranks` every rank drives its share of each
step's groups (rollout_ranks.py), with `rollout.driver_process=true` in a rollout worker
process of its own (rollout_process.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gspo_agents import rundir
from gspo_agents.components import (
    base_model_dir,
    build_driver,
    build_env_factory,
    build_sandbox,
    check_engine_answers,
    check_one_host,
    close_rollouts,
    on_served_engine,
    quiet_libraries,
    resolve_start_model,
    serve_local_engine,
    startup_objects_frozen,
)
from gspo_agents.config import (
    CONFIG_DIR,
    check_choices,
    check_overrides,
    register_schemas,
)
from gspo_agents.env_sizing import apply_env_sizing, explicit_keys, fit_to_prompts, measure_prompts
from gspo_agents.interrupt import StepAbandoned, StopSignals, say_stopped
from gspo_agents.wiring import build_held_out, build_learner, build_tracker, sync_start_weights

# Modules that import torch (trajectory, batching, models, ...) are imported inside the functions
# that use them: `python -m gspo_agents.train trainer.total_steps=5` is rejected before torch
# loads (tests/test_cli_errors.py proves the import stays out).

CONSOLE_KEYS = "reward_mean loss clip_frac_tokens ratio_max grad_norm errors step_time_s".split()
CONSOLE_KEYS += ["eval/pass@1", "eval/pass@k"]  # on the steps with a held-out evaluation


async def training_loop(
    cfg, learner, manager, tasks, tracker, run_dir: Path, start_step: int, held_out=None
):
    """Consumes task rows; produces one optimizer update per step and fresh engine weights.

    Waits on the rollout manager (generation + env steps) and then on the learner. SIGINT or
    SIGTERM end the loop after the current step (a second one abandons its rollouts); either
    way a checkpoint of the last completed step is written.
    """
    from gspo_agents import samples
    from gspo_agents.batching import tasks_for_step
    from gspo_agents.refill import collect_step
    from gspo_agents.step_errors import ErrorReport, RunErrors, RunStalled, untrained_reason

    t = cfg.trainer
    step = start_step
    errors = RunErrors(t.max_failed_steps, rundir.log_only, trained_before=start_step > 0)
    with StopSignals() as signals:
        if t.async_rollouts:  # generation of step k+1 overlaps the update of step k
            manager.start_prefetch(tasks_for_step(tasks, start_step, t.tasks_per_step, t.seed))
        try:
            while step < t.steps and not signals.stop.is_set():
                started = time.monotonic()
                result = await signals.collecting(collect_step(manager, tasks, step, t, cfg))
                metrics = await train_step(cfg, learner, manager, result, run_dir, step)
                report = ErrorReport.of_step(result.groups)
                metrics["errors"] = report.total
                metrics["step_time_s"] = time.monotonic() - started
                untrained = untrained_reason(result.groups, metrics)
                metrics["trained_nothing"] = float(untrained is not None)
                if untrained is not None:
                    metrics["untrained_reason"] = untrained
                samples.save_if_due(
                    cfg,
                    run_dir,
                    step + 1,
                    result.groups,
                    manager.chat.tokenizer,
                    untrained is not None,
                )
                step += 1
                if held_out is not None and held_out.due(step):  # trainer.eval_every_steps
                    metrics.update(await held_out.run(manager.engine, step))
                tracker.log(step, metrics)
                tracker.console(step, metrics, CONSOLE_KEYS)
                errors.after_step(step, report, untrained, groups=result.groups)
                if t.save_every_steps and step % t.save_every_steps == 0 and step < t.steps:
                    learner.save_checkpoint(str(run_dir / "checkpoint"), {"step": step})
        except StepAbandoned:
            print(f"abandoned step {step + 1}", file=sys.stderr, flush=True)
        except RunStalled:  # after a complete step: its state is sound, keep it
            rundir.finish_run(learner, run_dir, step)
            raise
        # Any other exception may have struck mid-update: the last periodic checkpoint stands.
        rundir.finish_run(learner, run_dir, step)
    if step < t.steps:
        say_stopped(step, t.steps, run_dir / "checkpoint")
    return step


async def train_step(cfg, learner, manager, result, run_dir: Path, step: int) -> dict:
    """Advantages, the GSPO update and the engine's new weights for one step's rollouts."""
    from gspo_agents.batching import prepare_batch

    metrics = dict(result.metrics)
    a = cfg.algorithm
    prepared = prepare_batch(
        result.groups,
        pad_id=learner.pad_token_id,
        filter_zero_spread=a.filter_zero_spread_groups,
        per_turn=a.name == "gspo_token",
        turn_discount=a.turn_discount,
        normalize_std=a.normalize_std,
        overlong_filter=a.overlong_filter,
        overlong_penalty=a.overlong_penalty,
        overlong_buffer=a.overlong_buffer,
        max_new_tokens_per_turn=cfg.rollout.max_new_tokens_per_turn,
        current_version=manager.weight_version,
        max_version_lag=cfg.rollout.max_version_lag,
    )
    metrics.update(prepared.metrics)
    if prepared.batch is not None:
        metrics.update(await asyncio.to_thread(learner.update, prepared.batch))
        weights = await asyncio.to_thread(
            learner.export_hf, str(run_dir / "weights" / f"step{step + 1}")
        )
        await manager.update_weights(weights, version=step + 1)
        rundir.keep_latest_weights(run_dir, Path(weights).name)
    return metrics


def run(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """Train as `cfg` says; returns a summary. The Python API and the CLI both land here.
    `overrides`: the keys set explicitly, which an env class's `default_sizing` never replaces."""
    import envs

    explicit = explicit_keys(overrides or [])
    cfg = apply_env_sizing(cfg, explicit)
    check_choices(cfg)
    from gspo_agents.learner.parallel import broadcast_object, init_process
    from gspo_agents.models import load_tokenizer

    if cfg.engine.kind == "sglang":
        asyncio.run(check_engine_answers(cfg))  # before minutes of cold start, not after
    process = init_process()  # joins torchrun's process group; a no-op for one process
    env = envs.make(cfg.env.name, **OmegaConf.to_container(cfg.env.kwargs, resolve=True))
    tasks = env.load_tasks(cfg.env.train_split)[: cfg.env.max_train_tasks or None]
    all_ranks = cfg.rollout.drivers == "all_ranks" and process.world_size > 1
    if process.rank == 0:  # the rollouts' budgets (rank 0's alone), before any cold start
        lengths = measure_prompts(cfg, env, tasks, load_tokenizer(base_model_dir(cfg)))
        cfg = fit_to_prompts(cfg, lengths, explicit)
    if all_ranks:  # every rank drives: with rank 0's budgets
        cfg = broadcast_object(cfg, process)
    # the judging sandbox before the run dir: a missing Docker daemon leaves no stub run behind
    sandbox = build_sandbox(cfg, cfg.env.name) if process.rank == 0 or all_ranks else None
    owned = (
        rundir.own_run_dir(Path(cfg.trainer.run_dir), cfg.trainer.resume, cfg)
        if process.rank == 0
        else contextlib.nullcontext(False)
    )
    with owned as resume:
        return _run(cfg, process, resume, env, tasks, sandbox)


def _run(cfg: DictConfig, process, resume: bool, env, tasks: list[dict], sandbox=None) -> dict:
    from gspo_agents.learner.parallel import broadcast_object, close_process
    from gspo_agents.learner_group import LearnerGroup, follow
    from gspo_agents.models import load_tokenizer
    from gspo_agents.rollout_ranks import FollowerRollouts, RankDrivers, rollout_group

    t = cfg.trainer
    random.seed(t.seed)
    run_dir = Path(t.run_dir)
    model_dir = resolve_start_model(cfg, env) if process.rank == 0 else None
    model_dir = broadcast_object(model_dir, process)  # followers wait here while rank 0 cold-starts
    tokenizer = load_tokenizer(model_dir)
    learner = build_learner(cfg, model_dir)
    all_ranks = cfg.rollout.drivers == "all_ranks" and process.world_size > 1
    group, served = (rollout_group(), None) if all_ranks else (None, None)
    if all_ranks and cfg.engine.kind == "local":  # one engine for all: rank 0 serves it
        check_one_host(process)
        served = serve_local_engine(cfg, model_dir) if process.rank == 0 else None
        cfg = on_served_engine(cfg, broadcast_object(served and served.url, process))
    if learner.is_main or all_ranks:
        env_factory = build_env_factory(cfg, sandbox, getattr(tokenizer, "chat_template", None))
    if not learner.is_main:
        rollouts = None
        if all_ranks:
            rollouts = FollowerRollouts(
                lambda: build_driver(cfg, model_dir, tokenizer, env_factory),
                lambda engine: close_rollouts(engine, sandbox),
                process.rank,
                process.world_size,
                group,
            )
        with startup_objects_frozen():
            follow(learner, rollouts)
        close_process(process)
        return {"run_dir": str(run_dir), "rank": process.rank}
    learner = LearnerGroup(learner)
    start_step = rundir.resume_from_checkpoint(learner, run_dir) if resume else 0
    manager, engine = build_driver(cfg, model_dir, tokenizer, env_factory)
    if all_ranks:
        manager = RankDrivers(manager, group, process.world_size)
    tracker = build_tracker(cfg, run_dir, start_step)
    print(
        f"run dir: {run_dir} | model: {model_dir} | env: {cfg.env.name} ({len(tasks)} tasks)",
        file=sys.stderr,
    )
    held_out = build_held_out(cfg, env, env_factory, tokenizer)

    async def main_async():
        try:
            await sync_start_weights(cfg, manager, learner, model_dir, start_step)
            return await training_loop(
                cfg, learner, manager, tasks, tracker, run_dir, start_step, held_out
            )
        finally:
            await manager.aclose()
            await close_rollouts(engine, sandbox)

    wandb_dir = tracker.wandb_dir
    try:
        with startup_objects_frozen():
            final_step = asyncio.run(main_async())
    finally:
        tracker.close()
        learner.close()  # the other ranks close their rollouts at its STOP
        if served is not None:
            served.stop()
        close_process(process)
    return {"run_dir": str(run_dir), "final_step": final_step, "wandb_dir": wandb_dir}


register_schemas()


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from gspo_agents.cli import user_errors_as_one_line

    with user_errors_as_one_line():
        import envs

        envs.resolve_id(cfg.env.name)  # an unknown env id in a second, before torch loads
        check_choices(cfg)  # before torch loads; again after the env's sizing in run()
    quiet_libraries()
    if cfg.trainer.nproc > 1 and "RANK" not in os.environ:
        from gspo_agents.learner_group import relaunch_under_torchrun

        sys.exit(relaunch_under_torchrun(cfg.trainer.nproc, sys.argv[1:]))
    from gspo_agents.learner_group import announce_rank0

    announce_rank0()
    with user_errors_as_one_line():
        summary = run(cfg, sys.argv[1:])
    print(f"done: {summary}", file=sys.stderr)


def cli() -> None:
    """`python -m gspo_agents.train`: overrides checked first (with a did-you-mean), then Hydra;
    user errors end in one clear line, not a traceback."""
    from gspo_agents.cli import run_cli

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched_by_torchrun (no torch yet)
        from gspo_agents.learner.parallel import run_then_exit

        # a learner rank: no interpreter finalization (see run_then_exit)
        run_then_exit(lambda: run_cli(main, check_overrides))
    run_cli(main, check_overrides)


if __name__ == "__main__":
    cli()
