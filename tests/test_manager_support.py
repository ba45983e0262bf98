"""Shared pieces of the rollout-manager tests: a multi-turn test env and model fixtures.

Holds no tests itself. The env is deliberately independent of the project's real environments so
manager tests do not break when those change.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import torch

from envs.base import TextEnv
from envs.errors import InfraError
from gspo_agents.logprobs import token_logprobs
from gspo_agents.models import ModelConfig, load_model, load_tokenizer, resolve_model
from gspo_agents.trajectory import Trajectory


class CounterEnv(TextEnv):
    """Ends after `task["turns"]` model turns; each non-final turn answers with a user message.

    Reward: 1.0 when the total length of the model's answers is even, else 0.0 — arbitrary, but a
    function of what the model said, so groups have spread. Task keys steer failures:
    `infra_error_on_reset`, `infra_error_on_turn` / `raise_on_turn` (1-based), `step_delay_s`. A class-level gauge
    records how many episodes are live at once.
    """

    live = 0
    max_live = 0
    release: asyncio.Event | None = None  # when set by a test, astep waits for it
    waiting = 0  # episodes currently held by `release`

    def __init__(self, max_turns: int = 8) -> None:
        super().__init__(max_turns=max_turns)
        self.actions: list[str] = []
        self._open = False

    def initial_messages(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": "You are a counter."},
            {"role": "user", "content": f"Task {task['id']}: talk for {task['turns']} turns."},
        ]

    def reset(self, *, seed=None, options=None):
        if options and options.get("task", {}).get("infra_error_on_reset"):
            raise InfraError("sandbox for this episode did not start")
        out = super().reset(seed=seed, options=options)
        self.actions = []
        if not self._open:
            self._open = True
            CounterEnv.live += 1
            CounterEnv.max_live = max(CounterEnv.max_live, CounterEnv.live)
        return out

    def close(self) -> None:
        if self._open:
            self._open = False
            CounterEnv.live -= 1

    def step(self, action: str):
        task = self._require_task()
        self.turn += 1
        self.actions.append(action)
        if task.get("infra_error_on_turn") == self.turn:
            raise InfraError(f"sandbox died on turn {self.turn}")
        if task.get("raise_on_turn") == self.turn:
            raise RuntimeError(f"env bug on turn {self.turn}")
        if self.turn >= task["turns"]:
            reward = float(sum(len(a) for a in self.actions) % 2 == 0)
            return [], reward, True, False, {"turn_reward": reward}
        truncated = self.turn >= self.max_turns
        obs = [{"role": "user", "content": f"Turn {self.turn} done ({len(action)} chars). Go on."}]
        return obs, 0.0, False, truncated, {"turn_reward": 0.0}

    async def astep(self, action: str):
        task = self._require_task()
        if task.get("step_delay_s"):
            await asyncio.sleep(task["step_delay_s"])
        if CounterEnv.release is not None:
            CounterEnv.waiting += 1
            try:
                await CounterEnv.release.wait()
            finally:
                CounterEnv.waiting -= 1
        return self.step(action)

    @classmethod
    def reset_gauges(cls) -> None:
        cls.live = cls.max_live = cls.waiting = 0
        cls.release = None


def tiny_model_dir() -> str:
    return resolve_model(ModelConfig(name="tiny"))


def tiny_tokenizer():
    return load_tokenizer(tiny_model_dir())


def perturbed_weights(src_dir: str, out_dir: Path, scale: float = 0.5, seed: int = 1) -> str:
    """A copy of the model at `src_dir` with noisy weights: same architecture, other policy."""
    model = load_model(src_dir)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(
                torch.randn(p.shape, generator=gen) * scale * (p.std() if p.numel() > 1 else 1.0)
            )
    model.save_pretrained(out_dir)
    return str(out_dir)


def forward_logprobs(model_dir: str, ids: list[int]) -> list[float]:
    """Reference per-token log-probs of `ids` from a plain forward of the model at `model_dir`."""
    model = _cached_model(model_dir)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits
    return token_logprobs(logits, torch.tensor([ids]))[0].tolist()


_MODELS: dict[str, torch.nn.Module] = {}


def _cached_model(model_dir: str) -> torch.nn.Module:
    if model_dir not in _MODELS:
        _MODELS[model_dir] = load_model(model_dir)
    return _MODELS[model_dir]


def model_positions(traj: Trajectory) -> list[tuple[int, int, float, int]]:
    """(position, token, engine log-prob, version) of every model token in `traj`."""
    out = []
    pos = len(traj.prompt_ids)
    for seg in traj.segments:
        if seg.kind == "model":
            for i, tok in enumerate(seg.token_ids):
                out.append((pos + i, tok, seg.logprobs[i], seg.versions[i]))  # type: ignore[index]
        pos += len(seg.token_ids)
    return out
