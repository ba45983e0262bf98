"""A tiny OpenEnv environment written with the real `openenv` base classes, served by its server.

`python tests/envs/openenv_echo_server.py PORT`: an MCP env whose reset asks for a sum, with one
tool `answer(value)` that ends the episode with reward 1.0 iff the value is right.
"""

from __future__ import annotations

import os
import random
import sys
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    MCPEnvironment,
    Observation,
    State,
    create_app,
)


class SumObservation(Observation):
    prompt: str = ""


class SumEnv(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("sum")
        self.expected = 0

        @mcp.tool()
        def answer(value: int) -> str:
            """Submit the sum.

            Args:
                value: the sum of the two numbers
            """
            return "correct" if value == self.expected else "wrong"

        super().__init__(mcp)
        self._state = State(episode_id="", step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any):
        rng = random.Random(seed)
        a, b = rng.randint(1, 4), rng.randint(1, 4)
        self.expected = a + b
        if os.environ.get("SUM_ENV_LOG"):  # the test counts the episodes that reached the server
            with open(os.environ["SUM_ENV_LOG"], "a") as f:
                f.write(f"reset {seed}\n")
        self._state = State(episode_id=episode_id or str(seed), step_count=0)
        return SumObservation(prompt=f"Compute {a}+{b} and call answer.", done=False, reward=0.0)

    async def step_async(self, action: Any, timeout_s: float | None = None, **kw: Any):
        obs = await super().step_async(action, timeout_s=timeout_s, **kw)
        if isinstance(action, CallToolAction) and isinstance(obs, CallToolObservation):
            self._state.step_count += 1
            data = getattr(obs.result, "data", None)
            obs.reward, obs.done = (1.0 if data == "correct" else 0.0), True
        return obs

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kw: Any) -> Observation:
        return SumObservation(prompt="unknown action", done=False, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(SumEnv, CallToolAction, SumObservation, env_name="sum", max_concurrent_envs=16)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
