"""Train on an agent loop the user writes: an async function that talks to the OpenAI-compatible
endpoint (openai_endpoint.py) with the `openai` package.

    async def agent(ctx: AgentContext) -> float | None:
        client = openai.AsyncOpenAI(base_url=ctx.base_url, api_key="-",
                                    default_headers=ctx.headers)
        ...  # any number of chat.completions.create(model=ctx.model, ...) calls
        return reward  # or None, and give AgentManager a reward_fn

`AgentManager` stands where the RolloutManager stands in train.py's loop (`collect`,
`update_weights`, `weight_version`, `chat`, `engine`): for each task it runs the agent
`num_samples_per_task` times, each under its own session id, and returns the sessions' recorded
trajectories (the engine's own ids, log-probs and versions) grouped by task, with the reward. A
session whose history broke the prefix (see openai_endpoint.py) gives several trajectories, all
with the session's reward. An agent that raises, times out or makes no call is an error
trajectory (counted, never reward 0).

Synchronous only: generation of a step does not overlap the update (no `start_prefetch`).
"""

from __future__ import annotations

import asyncio
import math
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gspo_agents.rollout.engine import Engine
from gspo_agents.rollout.episode import run_all
from gspo_agents.rollout.metrics import trajectory_metrics
from gspo_agents.rollout.openai_endpoint import (
    SESSION_HEADER,
    OpenAIEndpoint,
    Session,
    serve_endpoint,
)
from gspo_agents.rollout.records import RolloutConfig, RolloutResult
from gspo_agents.trajectory import Status, Trajectory

__all__ = ["AgentContext", "AgentManager"]


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What one agent run gets: where to call, under which session, for which task."""

    base_url: str  # the endpoint's `.../v1`, for openai.AsyncOpenAI(base_url=...)
    session_id: str
    task: dict
    model: str

    @property
    def headers(self) -> dict[str, str]:
        """Send these with every call (`default_headers=`): they key the recording."""
        return {SESSION_HEADER: self.session_id}


AgentFn = Callable[[AgentContext], Awaitable[Any]]
RewardFn = Callable[[dict, Any, Session], float]  # (task, what the agent returned, its session)


class AgentManager:
    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        agent: AgentFn,
        cfg: RolloutConfig,
        *,
        reward_fn: RewardFn | None = None,
    ) -> None:
        self.engine = engine
        self.agent = agent
        self.reward_fn = reward_fn
        self.cfg = cfg
        self.endpoint = OpenAIEndpoint(
            engine,
            tokenizer,
            max_new_tokens=cfg.max_new_tokens_per_turn,
            max_context_tokens=cfg.max_context_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            past_reasoning=cfg.past_reasoning,
            tool_format=cfg.tool_format,
        )
        self.chat = self.endpoint.chat
        self._version = int(engine.weight_version)
        self._server: Any = None
        self._base_url = ""
        self._live = asyncio.Semaphore(cfg.max_live_trajectories)

    @property
    def weight_version(self) -> int:
        return self._version

    async def collect(self, tasks: list[dict]) -> RolloutResult:
        """G agent runs per task; their trajectories grouped by task."""
        if not tasks:
            raise ValueError("collect() needs at least one task row")
        await self._serving()
        G = self.cfg.num_samples_per_task
        runs = await run_all(
            self._run(task, gid, sample)
            for task in tasks
            for gid in [uuid.uuid4().hex]
            for sample in range(G)
        )
        groups = [
            [t for run in runs[i * G : (i + 1) * G] for t in run[0]] for i in range(len(tasks))
        ]
        metrics = trajectory_metrics(groups)
        metrics["rollout/prefix_breaks"] = float(sum(breaks for _, breaks in runs))
        metrics["rollout/weight_version"] = float(self._version)
        return RolloutResult(groups, metrics)

    async def sync_start_weights(self, path: str, version: int) -> None:
        if version:
            await self.update_weights(path, version)

    async def update_weights(self, path: str, version: int) -> None:
        await self.engine.update_weights(path, version)
        self._version = version

    async def aclose(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await server.__aexit__(None, None, None)

    # -- one run --------------------------------------------------------------------------------
    async def _serving(self) -> None:
        if self._server is None:
            self._server = serve_endpoint(self.endpoint)
            self._base_url = await self._server.__aenter__()

    async def _run(self, task: dict, group_id: str, sample: int) -> tuple[list[Trajectory], int]:
        sid = f"{group_id}-{sample}-{uuid.uuid4().hex[:8]}"
        ctx = AgentContext(self._base_url, sid, task, self.endpoint.model_name)
        error: str | None = None
        tb: str | None = None
        returned: Any = None
        async with self._live:
            try:
                returned = await asyncio.wait_for(self.agent(ctx), self.cfg.trajectory_timeout_s)
            except asyncio.TimeoutError:
                error = f"agent deadline of {self.cfg.trajectory_timeout_s} s exceeded"
            except Exception as exc:  # the agent's own failure: its trajectory's error
                error = f"{type(exc).__name__} in the agent: {exc}"
                tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        session = self.endpoint.pop_session(sid)
        trajs = session.trajectories or [Trajectory([], task_id=sid)]
        reward = None
        if error is None and not session.trajectories:
            error = "the agent made no call with its session header"
        if error is None:
            reward, error = self._reward(task, returned, session)
        for traj in trajs:
            traj.task_id, traj.group_id = str(task.get("id", "")), group_id
            traj.info.update(sample=sample, session_id=sid, prefix_breaks=session.prefix_breaks)
            if error is not None:
                traj.status, traj.error, traj.reward = Status.ERROR, error, None
                traj.info["error_kind"] = "agent"
                if tb is not None:
                    traj.info["traceback"] = tb
            else:
                traj.status, traj.reward = Status.COMPLETE, reward
        return trajs, session.prefix_breaks

    def _reward(
        self, task: dict, returned: Any, session: Session
    ) -> tuple[float | None, str | None]:
        value = returned if self.reward_fn is None else self.reward_fn(task, returned, session)
        try:
            reward = float(value)
        except (TypeError, ValueError):
            return None, (
                f"the agent returned {value!r}, not a reward; return a float from the agent "
                "or give AgentManager a reward_fn"
            )
        if not math.isfinite(reward):
            return None, f"non-finite reward {reward!r}"
        return reward, None
