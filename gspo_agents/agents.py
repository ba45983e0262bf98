"""`train_agent(agent, tasks, *overrides)`: GSPO on an agent loop the user runs against the
OpenAI-compatible endpoint (gspo_agents/rollout/agent.py has the agent's contract).

The same pieces as `python -m gspo_agents.train` (the learner, the engine, `train_step`), with
the AgentManager where the RolloutManager stands: the agent, not an env, drives the episode.
One learner process, synchronous rollouts; no checkpoints or resume (use the CLI for those).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gspo_agents.rollout.agent import AgentFn, RewardFn

__all__ = ["train_agent"]


def train_agent(
    agent: AgentFn,
    tasks: list[dict],
    *overrides: str,
    reward_fn: RewardFn | None = None,
) -> list[dict[str, Any]]:
    """Train `trainer.steps` steps on `tasks` (dict rows; `id` names a task); returns each
    step's metrics (`reward_mean`, `loss`, `rollout/prefix_breaks`, ...). Weights go to
    `trainer.run_dir`/weights, some sessions as text to `trainer.run_dir`/samples."""
    from omegaconf import OmegaConf

    from gspo_agents import samples
    from gspo_agents.api import Trainer
    from gspo_agents.batching import tasks_for_step
    from gspo_agents.components import base_model_dir, build_engine
    from gspo_agents.models import load_tokenizer
    from gspo_agents.rollout.agent import AgentManager
    from gspo_agents.rollout.records import RolloutConfig
    from gspo_agents.train import build_learner, train_step

    if not tasks or not all(isinstance(t, dict) for t in tasks):
        raise ValueError("train_agent: tasks must be a non-empty list of dict rows")
    cfg = Trainer(*overrides).config
    t = cfg.trainer
    model_dir = base_model_dir(cfg)
    learner = build_learner(cfg, model_dir)
    engine = build_engine(cfg, model_dir, t.seed)
    rollout_cfg = RolloutConfig(**OmegaConf.to_container(cfg.rollout, resolve=True))
    run_dir = Path(t.run_dir)
    manager = AgentManager(
        engine, load_tokenizer(model_dir), agent, rollout_cfg, reward_fn=reward_fn
    )

    async def loop() -> list[dict[str, Any]]:
        history = []
        try:
            for step in range(t.steps):
                result = await manager.collect(
                    tasks_for_step(tasks, step, t.tasks_per_step, t.seed)
                )
                metrics = await train_step(cfg, learner, manager, result, run_dir, step)
                # what the agent's sessions were, as text (python -m gspo_agents.samples RUN_DIR)
                samples.save_if_due(
                    cfg, run_dir, step + 1, result.groups, manager.chat.tokenizer, False
                )
                history.append(metrics)
        finally:
            await manager.aclose()
            await engine.close()
        return history

    try:
        return asyncio.run(loop())
    finally:
        learner.close()
