"""A custom env whose every step raises (or whose reset returns a string), for the train CLI tests.

Registered with `gymnasium.register` before `gspo_agents.train.main` runs, as the README tells
users to do with their own envs.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envs.arithmetic import ArithmeticEnv

STEP_RAISES = "broken/StepRaises-v0"
STRING_MESSAGES = "broken/StringMessages-v0"


class StepRaisesEnv(ArithmeticEnv):
    def step(self, action: str):
        return self.grade(action)

    def grade(self, action: str):
        raise ZeroDivisionError(f"grader exploded on {len(action)} characters")


class StringMessagesEnv(ArithmeticEnv):
    def initial_messages(self, task: dict[str, Any]):
        return "What is 1 + 1?"  # a string where a list of messages belongs


def register() -> None:
    for env_id, cls in ((STEP_RAISES, StepRaisesEnv), (STRING_MESSAGES, StringMessagesEnv)):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=cls, disable_env_checker=True)
