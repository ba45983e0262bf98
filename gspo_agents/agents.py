"""`train_agent(agent, tasks, *overrides)`: GSPO on an agent loop the user runs against the
OpenAI-compatible endpoint (gspo_agents/rollout/agent.py has the agent's contract); and
`load_agent("MODULE:FUNCTION")`, how `python -m gspo_agents.train agent=MODULE:FUNCTION env=...`
finds one (that path trains with the CLI's checkpoints, resume, logging and stop rules).

The same pieces as `python -m gspo_agents.train` (the learner, the engine, `train_step`), with
the AgentManager where the RolloutManager stands: the agent, not an env, drives the episode.
One learner process, synchronous rollouts; no checkpoints or resume (use the CLI for those).
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # this module is imported by the config check, before torch
    from gspo_agents.rollout.agent import AgentFn, RewardFn

__all__ = ["load_agent", "train_agent"]


def load_agent(entry: str) -> AgentFn:
    """The async function `entry` names: `MODULE:FUNCTION` (MODULE importable, e.g. from the
    working directory) or `path/to/file.py:FUNCTION`. A wrong name fails with a ConfigError
    naming the fix (and the closest async function of the module)."""
    from gspo_agents.config import ConfigError

    where, _, name = entry.rpartition(":")
    if not where or not name.isidentifier():
        raise ConfigError(
            f"agent={entry!r}: write MODULE:FUNCTION (e.g. agent=my_agent:run, the async "
            "function in my_agent.py of the working directory) or path/to/file.py:FUNCTION"
        )
    module = _import_agent_module(entry, where)
    fn = getattr(module, name, None)
    if not inspect.iscoroutinefunction(fn):
        found = sorted(n for n, v in vars(module).items() if inspect.iscoroutinefunction(v))
        close = difflib.get_close_matches(name, found, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        what = "is not an async function" if fn is not None else "does not exist"
        raise ConfigError(
            f"agent={entry}: {where}.{name} {what}; the agent is `async def {name}(ctx)` "
            f"(async functions there: {', '.join(found) or 'none'}).{hint}"
        )
    return fn


def _import_agent_module(entry: str, where: str) -> Any:
    from gspo_agents.config import ConfigError

    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"agent={entry}: no file {path}")
        name = f"gspo_user_agent_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"agent={entry}: {path} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # `gspo-train` as a script: the working directory
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        if exc.name is None or not where.startswith(exc.name):
            raise  # the agent's module imports something missing: its own traceback
        raise ConfigError(
            f"agent={entry}: no module {where!r} (looked in the working directory "
            f"{Path.cwd()} and the installed packages); give path/to/file.py:FUNCTION instead"
        ) from None


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
