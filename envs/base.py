"""The text-environment API: a Gymnasium `Env` whose observations are chat messages.

Contract (shared/DESIGN.md):
- reset(*, seed, options={"task": row}) -> (messages, info): the opening chat messages of the task.
- step(action_text) -> (messages, reward, terminated, truncated, info): `messages` holds only the
  NEW messages (tool output, judge feedback); empty when the episode is over.
- astep(action_text): the same, awaitable; envs that do I/O (sandbox, verifier pool) override it
  so the rollout manager's event loop never blocks. The default runs step() in a worker thread.
- Infrastructure failures raise envs.errors.InfraError; they are never a reward of 0.
- info["turn_reward"] carries the reward of this turn (per-turn rewards for GSPO-token);
  the trajectory's reward is the reward returned by the terminating step.

Environments know nothing of tokens, engines or torch.
"""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium as gym

Message = dict[str, str]  # {"role": "system" | "user" | "assistant" | "tool", "content": str}


class TextEnv(gym.Env):
    """Base class for text agents. Subclasses implement `_reset` and `_score` / `step`."""

    metadata: dict[str, Any] = {"render_modes": []}
    # Observations and actions are free text; Gymnasium's Text space is the honest description.
    observation_space = gym.spaces.Text(max_length=1 << 20)
    action_space = gym.spaces.Text(max_length=1 << 20)

    def __init__(self, max_turns: int = 1) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.task: dict[str, Any] | None = None
        self.turn = 0

    # -- data -----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        """Task rows of a split ("train" / "test"); each row has a unique "id"."""
        raise NotImplementedError(f"{type(self).__name__} does not ship tasks")

    def reference_response(self, task: dict[str, Any]) -> str | None:
        """A correct assistant answer for cold-start SFT, or None when the task has none."""
        return None

    # -- episode --------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if not options or "task" not in options:
            raise ValueError(
                "reset() needs options={'task': row}; rows come from load_tasks(split)"
            )
        self.task = options["task"]
        self.turn = 0
        return self.initial_messages(self.task), {"task_id": str(self.task.get("id", ""))}

    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        raise NotImplementedError

    def step(self, action: str):
        raise NotImplementedError

    async def astep(self, action: str):
        return await asyncio.to_thread(self.step, action)

    def _require_task(self) -> dict[str, Any]:
        if self.task is None:
            raise RuntimeError("step() called before reset(options={'task': row})")
        return self.task
