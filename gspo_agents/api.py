"""The Python API: the training command as an object, taking the same overrides as the CLI.

    from gspo_agents import Trainer

    trainer = Trainer("env=arithmetic", "trainer.steps=20", "trainer.run_dir=runs/api-demo")
    print(trainer.config.rollout.num_samples_per_task)  # the composed, validated config
    summary = trainer.fit()  # {"run_dir": ..., "final_step": 20, ...}

`fit()` is `python -m gspo_agents.train <overrides>` in this process: the same config, run dir
lock, resume, checkpoints, metrics and console lines. One learner process only; for
`trainer.nproc>1` use the CLI (it relaunches itself under torchrun).

TRL's way, a dataset and reward functions (envs/reward_functions.py has the contract):

    def correct(prompts, completions, answer, **_):
        return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]

    Trainer("trainer.steps=20", dataset=[{"prompt": "2+2?", "answer": "4"}, ...],
            reward_funcs=[correct]).fit()
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig


class Trainer:
    def __init__(
        self,
        *overrides: str,
        dataset: Any = None,
        reward_funcs: Any = None,
        eval_dataset: Any = None,
        reward_weights: Any = None,
        system_prompt: str | None = None,
    ) -> None:
        from hydra import compose, initialize_config_dir

        from gspo_agents.config import (
            CONFIG_DIR,
            ConfigError,
            check_choices,
            check_overrides,
            expand_shorthands,
            register_schemas,
        )

        self.overrides = expand_shorthands(list(overrides))  # agent=M:F is agent.entry=M:F
        if (dataset is None) != (reward_funcs is None):
            raise ConfigError("Trainer: give dataset= and reward_funcs= together (or neither)")
        if dataset is not None:
            if any(o.split("=", 1)[0].lstrip("+") == "env.name" for o in self.overrides):
                raise ConfigError("Trainer: dataset= builds the env; drop the env.name override")
            from envs.reward_functions import register_reward_env

            env_id = register_reward_env(
                dataset,
                reward_funcs,
                eval_dataset=eval_dataset,
                reward_weights=reward_weights,
                system_prompt=system_prompt,
            )
            self.overrides.append(f"env.name={env_id}")
        check_overrides(self.overrides)
        register_schemas()
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            self.config: DictConfig = compose(config_name="config", overrides=self.overrides)
        check_choices(self.config)
        if self.config.trainer.nproc > 1:
            raise ConfigError(
                "Trainer runs one learner process; for trainer.nproc>1 use "
                "`python -m gspo_agents.train trainer.nproc=N ...`"
            )

    def fit(self) -> dict[str, Any]:
        """Train (or resume the run in trainer.run_dir); returns the run's summary."""
        from gspo_agents.components import quiet_libraries
        from gspo_agents.train import run

        quiet_libraries()
        return run(self.config, self.overrides)
