"""Custom envs that fail (every step raises, reset returns a string, steps hang) or teach nothing
(a constant reward), for the train CLI tests.

Registered with `gymnasium.register` before `gspo_agents.train.main` runs, as the README tells
users to do with their own envs.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import gymnasium as gym

from envs.arithmetic import ArithmeticEnv

STEP_RAISES = "broken/StepRaises-v0"
STRING_MESSAGES = "broken/StringMessages-v0"
HANGS = "broken/HangsAfter-v0"
CONSTANT = "broken/ConstantReward-v0"
HANG_AFTER = "BROKEN_ENV_HANG_AFTER"  # steps graded normally in this process before all hang
HANG_MARKER = "BROKEN_ENV_HANG_MARKER"  # a file created when the first step hangs


class StepRaisesEnv(ArithmeticEnv):
    def step(self, action: str):
        return self.grade(action)

    def grade(self, action: str):
        raise ZeroDivisionError(f"grader exploded on {len(action)} characters")


class StringMessagesEnv(ArithmeticEnv):
    def initial_messages(self, task: dict[str, Any]):
        return "What is 1 + 1?"  # a string where a list of messages belongs


class ConstantRewardEnv(ArithmeticEnv):
    """Every answer scores `constant`: no group ever has reward spread, so nothing is learned."""

    def __init__(self, difficulty: int = 1, constant: float = 2.0) -> None:
        super().__init__(difficulty)
        self.constant = constant

    def step(self, action: str):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, self.constant, terminated, truncated, {**info, "turn_reward": self.constant}


class HangsAfterEnv(ArithmeticEnv):
    """Grades normally until $BROKEN_ENV_HANG_AFTER env steps were taken in this process, then
    every step waits forever: a rollout collection that only a second Ctrl-C can end."""

    steps_taken = 0

    async def astep(self, action: str):
        HangsAfterEnv.steps_taken += 1
        if HangsAfterEnv.steps_taken > int(os.environ.get(HANG_AFTER, "1000000000")):
            if os.environ.get(HANG_MARKER):
                Path(os.environ[HANG_MARKER]).touch()
            await asyncio.Event().wait()
        return await super().astep(action)


def register() -> None:
    envs = (
        (STEP_RAISES, StepRaisesEnv),
        (STRING_MESSAGES, StringMessagesEnv),
        (HANGS, HangsAfterEnv),
        (CONSTANT, ConstantRewardEnv),
    )
    for env_id, cls in envs:
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=cls, disable_env_checker=True)
