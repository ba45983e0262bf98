"""Arithmetic-v0 with a broken step, for the hardening tests (importable by a train subprocess).

`fault` picks how step misbehaves on every `every`-th call in this process (a process-wide
counter, so a batch sees a deterministic mix of good and broken steps):
  raise       RuntimeError (an env bug) on each `every`-th call, InfraError on the one after
  nan_reward  returns reward NaN
  none_reward returns reward None
  bad_tuple   returns a 3-tuple instead of Gymnasium's 5-tuple
"""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym

from envs.arithmetic import ArithmeticEnv
from envs.errors import InfraError

ENV_ID = "hardening/FlakyArithmetic-v0"
_calls = itertools.count(1)


class FlakyArithmeticEnv(ArithmeticEnv):
    def __init__(self, fault: str = "raise", every: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fault, self.every = fault, every

    def step(self, action: str):
        n = next(_calls)
        if self.fault == "raise":
            if n % self.every == 0:
                raise RuntimeError(f"flaky env bug on call {n}")
            if n % self.every == 1 and n > 1:
                raise InfraError(f"flaky verifier outage on call {n}")
            return super().step(action)
        if n % self.every != 0:
            return super().step(action)
        obs, reward, terminated, truncated, info = super().step(action)
        if self.fault == "nan_reward":
            return obs, float("nan"), terminated, truncated, info
        if self.fault == "none_reward":
            return obs, None, terminated, truncated, info
        if self.fault == "bad_tuple":
            return obs, reward, terminated
        raise ValueError(f"unknown fault {self.fault!r}")


def register() -> None:
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=FlakyArithmeticEnv, disable_env_checker=True)
