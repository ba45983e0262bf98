"""The Python API: the training command as an object, taking the same overrides as the CLI.

    from gspo_agents import Trainer

    trainer = Trainer("env=arithmetic", "trainer.steps=20", "trainer.run_dir=runs/api-demo")
    print(trainer.config.rollout.num_samples_per_task)  # the composed, validated config
    summary = trainer.fit()  # {"run_dir": ..., "final_step": 20, ...}

`fit()` is `python -m gspo_agents.train <overrides>` in this process: the same config, run dir
lock, resume, checkpoints, metrics and console lines. One learner process only; for
`trainer.nproc>1` use the CLI (it relaunches itself under torchrun).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig


class Trainer:
    def __init__(self, *overrides: str) -> None:
        from hydra import compose, initialize_config_dir

        from gspo_agents.config import (
            CONFIG_DIR,
            ConfigError,
            check_choices,
            check_overrides,
            register_schemas,
        )

        self.overrides = list(overrides)
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
        from gspo_agents.train import quiet_libraries, run

        quiet_libraries()
        return run(self.config, self.overrides)
