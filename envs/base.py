"""The text-environment API: a Gymnasium `Env` whose observations are chat messages.

Contract (shared/DESIGN.md):
- reset(*, seed, options={"task": row}) -> (messages, info): the opening chat messages of the task.
  Without a task, reset samples one from the "train" split with the env's seeded RNG, so plain
  Gymnasium tools work (`gymnasium.utils.env_checker.check_env` passes for the built-in envs).
- step(action_text) -> (messages, reward, terminated, truncated, info): `messages` holds only the
  NEW messages (tool output, judge feedback); empty when the episode is over.
- astep(action_text): the same, awaitable; envs that do I/O (sandbox, verifier pool) override it
  so the rollout manager's event loop never blocks. The default runs step() in a worker thread.
- Infrastructure failures raise envs.errors.InfraError; they are never a reward of 0.
- info["turn_reward"] carries the reward of this turn (per-turn rewards for GSPO-token);
  the trajectory's reward is the reward returned by the terminating step.
- Class attributes the trainer reads (never the env's name): `needs_sandbox` (the env runs
  generated code; the trainer passes it a shared `sandbox=`), `uses_sessions` (the env opens
  sandbox sessions as configured by its `backend=` and `session_options=` kwargs; under
  `sandbox=remote` the trainer points them at the run's services) and `default_sizing` (run
  settings that fit the env, e.g. {"rollout.max_new_tokens_per_turn": 256}; see
  gspo_agents/train.py).

Environments know nothing of tokens, engines or torch.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import gymnasium as gym

Message = dict[str, str]  # {"role": "system" | "user" | "assistant" | "tool", "content": str}


class MessagesSpace(gym.spaces.Space):
    """Observations: a list of chat messages, each {"role": str, "content": str}."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content", ""), str)
            for m in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        words = ("add", "two", "numbers", "print", "the", "answer")
        picks = self.np_random.choice(len(words), size=4)
        return [{"role": "user", "content": " ".join(words[i] for i in picks)}]

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MessagesSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessagesSpace)


class TextEnv(gym.Env):
    """Base class for text agents. Subclasses implement `_reset` and `_score` / `step`."""

    metadata: dict[str, Any] = {"render_modes": []}
    # Observations are chat messages; actions are free text (the model's turn).
    observation_space = MessagesSpace()
    action_space = gym.spaces.Text(max_length=1 << 20)
    needs_sandbox: ClassVar[bool] = False
    uses_sessions: ClassVar[bool] = False  # takes backend= and session_options= (EpisodeSession)
    default_sizing: ClassVar[dict[str, Any]] = {}

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

    def reference_response(self, task: dict[str, Any]) -> str | list[str] | None:
        """A correct assistant answer for cold-start SFT, or None when the task has none. A
        multi-turn env may give its turns as a list (e.g. a tool call, then the final answer):
        the cold start steps the env with each and trains on every turn."""
        return None

    # -- episode --------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options and "task" in options:
            self.task = options["task"]
        else:  # plain Gymnasium use: a task drawn from the train split with the seeded RNG
            self.task = self._sample_task()
        self.turn = 0
        return self.initial_messages(self.task), {"task_id": str(self.task.get("id", ""))}

    def _sample_task(self) -> dict[str, Any]:
        if getattr(self, "_train_tasks", None) is None:
            self._train_tasks = self.load_tasks("train")
        if not self._train_tasks:
            raise ValueError(f"{type(self).__name__}.load_tasks('train') returned no tasks")
        return self._train_tasks[int(self.np_random.integers(len(self._train_tasks)))]

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
