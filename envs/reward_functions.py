"""An env made of a dataset and reward functions, as TRL's GRPOTrainer takes them.

    from gspo_agents import Trainer

    def brevity(prompts, completions, **columns):
        return [1.0 if len(c) < 40 else 0.0 for c in completions]

    Trainer("trainer.steps=20", dataset=[{"prompt": "Say hi."}, ...], reward_funcs=[brevity]).fit()

Rows: a list of dicts (or anything iterable of mappings: a `datasets.Dataset`, a `.jsonl` /
`.json` path), each with a `prompt` — a string (TRL's "standard" format) or a list of chat
messages ("conversational") — and any other columns, which reach the functions by name.

A reward function has TRL's signature, `f(prompts, completions, completion_ids=None, **columns)
-> list[float | None]`, called here with one-element lists (one completion per call, so no
batch waits for its slowest member); conversational prompts give conversational completions
(`[{"role": "assistant", "content": ...}]`). A function may be `async`; one that takes a
`sandbox` argument gets the run's sandbox (`sandbox.Sandbox`), so it can run generated code the
way the built-in code envs do, never on the host. The reward is the weighted sum of the functions'
values (`reward_weights`, default 1 each); `None` from a function means "not applicable" and
counts 0, as in TRL; a function's exception is a bug in the function and propagates, naming it.
Single-turn: the episode ends after the model's one answer.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from envs.base import Message, TextEnv

__all__ = ["RewardFunctionEnv", "load_rows", "register_reward_env"]

RewardFn = Callable[..., Any]


def load_rows(data: Any, what: str = "dataset") -> list[dict[str, Any]]:
    """Rows of a dataset given as rows, a datasets.Dataset, or a .jsonl/.json path."""
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.is_file():
            raise ValueError(f"{what}={str(data)!r}: no such file (a .jsonl or .json of rows)")
        text = path.read_text()
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = json.loads(text)
    else:
        rows = [dict(row) for row in data]
    if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping) for r in rows):
        raise ValueError(f"{what}: expected a non-empty list of rows (mappings), got {type(rows)}")
    for i, row in enumerate(rows):
        prompt = row.get("prompt")
        if not (isinstance(prompt, str) or _is_conversation(prompt)):
            raise ValueError(
                f"{what} row {i}: needs a 'prompt' that is a string or a list of chat messages "
                f"({{'role': ..., 'content': ...}}), got {type(prompt).__name__}"
            )
    return [dict(row) for row in rows]


def _is_conversation(prompt: Any) -> bool:
    return isinstance(prompt, list) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in prompt
    )


def resolve_functions(funcs: Sequence[RewardFn | str]) -> list[RewardFn]:
    """Callables, or "package.module:function" names (for env.kwargs on the command line)."""
    out = []
    for f in funcs:
        if isinstance(f, str):
            module, _, name = f.partition(":")
            if not name:
                raise ValueError(f"reward_funcs: {f!r} must be 'package.module:function'")
            f = getattr(importlib.import_module(module), name)
        if not callable(f):
            raise ValueError(f"reward_funcs: {f!r} is not callable")
        out.append(f)
    if not out:
        raise ValueError("reward_funcs: give at least one reward function")
    return out


class RewardFunctionEnv(TextEnv):
    """Single turn: the row's prompt; reward = the weighted sum of the reward functions."""

    def __init__(
        self,
        dataset: Any,
        reward_funcs: Sequence[RewardFn | str],
        *,
        eval_dataset: Any = None,
        reward_weights: Sequence[float] | None = None,
        system_prompt: str | None = None,
        sandbox: Any = None,
    ) -> None:
        super().__init__(max_turns=1)
        self.rows = {"train": _with_ids(load_rows(dataset), "train")}
        self.rows["test"] = (
            _with_ids(load_rows(eval_dataset, "eval_dataset"), "test") if eval_dataset else []
        )
        self.funcs = resolve_functions(reward_funcs)
        self.weights = list(reward_weights) if reward_weights else [1.0] * len(self.funcs)
        if len(self.weights) != len(self.funcs):
            raise ValueError(
                f"reward_weights has {len(self.weights)} values for {len(self.funcs)} functions"
            )
        self.system_prompt = system_prompt
        self.sandbox = sandbox
        wants = [f for f in self.funcs if "sandbox" in inspect.signature(f).parameters]
        if wants and sandbox is None:
            raise ValueError(
                f"reward function {wants[0].__name__} takes a sandbox but none was given "
                "(the trainer passes one when the env is registered with register_reward_env)"
            )

    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in self.rows:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        return self.rows[split]

    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        prompt = task["prompt"]
        messages = (
            [dict(m) for m in prompt]
            if isinstance(prompt, list)
            else [{"role": "user", "content": prompt}]
        )
        if self.system_prompt and messages[0].get("role") != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def step(self, action: str):
        raise RuntimeError("RewardFunctionEnv is asynchronous: use `await env.astep(text)`")

    async def astep(self, action: str):
        task = self._require_task()
        self.turn += 1
        values = [await self._score(f, task, action) for f in self.funcs]
        reward = sum(w * (0.0 if v is None else float(v)) for w, v in zip(self.weights, values))
        metrics = {
            f"reward_{f.__name__}": 0.0 if v is None else float(v)
            for f, v in zip(self.funcs, values)
        }
        info = {"turn": self.turn, "turn_reward": reward, "env_metrics": metrics}
        return [], reward, True, False, info

    async def _score(self, fn: RewardFn, task: dict[str, Any], text: str) -> float | None:
        prompt = task["prompt"]
        completion: Any = (
            [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
        )
        columns = {k: [v] for k, v in task.items() if k not in ("prompt", "id")}
        kwargs: dict[str, Any] = {"prompts": [prompt], "completions": [completion], **columns}
        params = inspect.signature(fn).parameters
        if "sandbox" in params:
            kwargs["sandbox"] = self.sandbox
        if "completion_ids" in params:
            kwargs["completion_ids"] = [None]  # ids stay with the trainer (token in, token out)
        result = fn(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, Sequence) or len(result) != 1:
            raise TypeError(
                f"reward function {fn.__name__} must return a list with one value per completion "
                f"(1 here), got {result!r}"
            )
        return result[0]


def _with_ids(rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    for i, row in enumerate(rows):
        row.setdefault("id", f"{split}-{i}")
    return rows


def register_reward_env(
    dataset: Any,
    reward_funcs: Sequence[RewardFn | str],
    **options: Any,
) -> str:
    """Register a RewardFunctionEnv over these rows and functions with Gymnasium; returns its id
    (`env.name=<id>`). The class declares `needs_sandbox` when a function takes a sandbox, so the
    trainer builds one and passes it in."""
    import gymnasium as gym

    funcs = resolve_functions(reward_funcs)
    rows = load_rows(dataset)
    needs = any("sandbox" in inspect.signature(f).parameters for f in funcs)
    digest = hashlib.sha256(
        json.dumps(
            [rows, [f"{f.__module__}.{f.__qualname__}" for f in funcs]], default=str
        ).encode()
    ).hexdigest()[:10]
    env_id = f"gspo/RewardFunctions-{digest}-v0"
    cls = type("RewardFunctionEnv", (RewardFunctionEnv,), {"needs_sandbox": needs})
    if env_id in gym.registry:
        del gym.registry[env_id]
    gym.register(
        id=env_id,
        entry_point=cast(Any, cls),
        kwargs={"dataset": rows, "reward_funcs": funcs, **options},
    )
    return env_id
