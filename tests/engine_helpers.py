"""Helpers shared by the tests that talk to `python -m gspo_agents.serve` over HTTP.

Holds no tests and no fixtures (those are in engine_fixtures.py, loaded with
`pytest_plugins = ["engine_fixtures"]`); import what you need by name.

- `launch_tiny`: a server subprocess on the tiny model (one torch thread), e.g. a second worker
  or a restart on the same port; `free_port` for the latter.
- `learner_logprobs` / `assert_learner_logprobs`: what the learner computes for the same tokens
  (one unpadded full forward), the reference the engine's log-probs must equal within `TOL`.
- `server_info`, `model_version`, `wait_steps`: read a server's state over plain HTTP.
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import torch

from gspo_agents.logprobs import token_logprobs
from gspo_agents.models import ModelConfig, resolve_model
from gspo_agents.rollout.engine import Generation
from gspo_agents.serve import ServerProcess, launch

TOL = 1e-4  # fp32 engine vs learner log-probs
SERVER_ARGS = ["--num-threads", "1"]


def tiny_model_path() -> str:
    return resolve_model(ModelConfig(name="tiny"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_tiny(tiny_path: str, port: int = 0) -> ServerProcess:
    """Another server on the tiny model (a second worker, or a restart on the same port)."""
    return launch(model_path=tiny_path, port=port, extra_args=SERVER_ARGS)


def learner_logprobs(model, prompt: list[int], tokens: list[int], temperature=1.0) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        return token_logprobs(model(ids).logits, ids, temperature)[0, len(prompt) :]


def assert_learner_logprobs(model, prompt: list[int], gen: Generation, temperature=1.0) -> None:
    expected = learner_logprobs(model, prompt, gen.token_ids, temperature)
    got = torch.tensor(gen.logprobs)
    assert torch.allclose(got, expected, atol=TOL, rtol=0), (got - expected).abs().max()


async def server_info(url: str) -> dict:
    async with httpx.AsyncClient(timeout=30.0) as c:
        return (await c.get(url + "/get_server_info")).json()


async def model_version(url: str) -> str:
    async with httpx.AsyncClient(timeout=30.0) as c:
        return (await c.get(url + "/get_model_info")).json()["weight_version"]


async def wait_steps(url: str, steps: int, task: asyncio.Future | None = None) -> None:
    """Until the server has run `steps` more forward steps (a request is really generating),
    or until `task` (the request being waited on) is done: a sampled stop token can end it
    early, and then no further step ever comes."""
    start = (await server_info(url))["stats"]["forward_steps"]
    while (await server_info(url))["stats"]["forward_steps"] < start + steps:
        if task is not None and task.done():
            return
        await asyncio.sleep(0.02)
