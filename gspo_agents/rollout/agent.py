"""Train on an agent loop the user writes: an async function that talks to the OpenAI-compatible
endpoint (openai_endpoint.py) with the `openai` package.

    async def agent(ctx: AgentContext) -> float | None:
        client = openai.AsyncOpenAI(base_url=ctx.base_url, api_key="-",
                                    default_headers=ctx.headers)
        ...  # any number of chat.completions.create(model=ctx.model, ...) calls
        return reward  # or None, and give AgentManager a reward_fn (or an env)

An agent program that must run inside a sandbox session (no network) gets one from
`ctx.session(limits, backend=...)`: the endpoint reaches it as a unix socket pinned to the
episode (session_endpoint.py).

`AgentManager` stands where the RolloutManager stands in train.py's loop (`collect`,
`update_weights`, `weight_version`, `chat`, `engine`): for each task it runs the agent
`num_samples_per_task` times, each under its own session id, and returns the sessions' recorded
trajectories (the engine's own ids, log-probs and versions) grouped by task, with the reward. A
session whose history broke the prefix (see openai_endpoint.py) gives several trajectories, all
with the session's reward. An agent that raises, times out or makes no call is an error
trajectory (counted, never reward 0).

With an `env_factory` (the CLI's `agent=MODULE:FUNCTION env=...`), each run gets a fresh env,
reset on the task: its opening messages are `ctx.messages`. The reward is the agent's number if
it returns one; otherwise the env scores the agent's answer (the string it returned, else the
text of the session's last completion) with one `step`, which must end the episode.

Synchronous only: generation of a step does not overlap the update (no `start_prefetch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gspo_agents.rollout.engine import Engine
from gspo_agents.rollout.episode import checked_step, close_env, reset_env, run_all
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
    messages: tuple[dict, ...] = ()  # the env's opening messages for the task (with an env)
    endpoint: OpenAIEndpoint | None = field(default=None, repr=False, compare=False)

    @property
    def headers(self) -> dict[str, str]:
        """Send these with every call (`default_headers=`): they key the recording."""
        return {SESSION_HEADER: self.session_id}

    @contextlib.asynccontextmanager
    async def session(
        self, limits: Any = None, *, backend: str = "auto", **options: Any
    ) -> AsyncIterator[Any]:
        """A sandbox session (`sandbox.session(limits, backend=..., **options)`) in which this
        episode's endpoint is reachable without a network: /gspo-host holds its unix socket,
        pinned to this session id, and `gspo_openai.py`, a stdlib client of it
        (session_endpoint.py). Run the agent program there with `ws.exec`/`ws.python`."""
        if self.endpoint is None:
            raise RuntimeError("AgentContext.session needs the AgentManager's endpoint")
        from gspo_agents.rollout.session_endpoint import episode_socket_dir
        from sandbox.sessions import session as sandbox_session

        async with episode_socket_dir(self.endpoint, self.session_id) as socket_dir:
            async with sandbox_session(
                limits, backend=backend, socket_dir=socket_dir, **options
            ) as ws:
                yield ws


AgentFn = Callable[[AgentContext], Awaitable[Any]]
RewardFn = Callable[[dict, Any, Session], float]  # (task, what the agent returned, its session)


class EnvScoreError(RuntimeError):
    """The env could not score the agent's answer (the trajectory's error, never reward 0)."""


class AgentManager:
    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        agent: AgentFn,
        cfg: RolloutConfig,
        *,
        reward_fn: RewardFn | None = None,
        env_factory: Callable[[], Any] | None = None,
    ) -> None:
        if reward_fn is not None and env_factory is not None:
            raise ValueError("AgentManager: give a reward_fn or an env_factory, not both")
        self.engine = engine
        self.agent = agent
        self.reward_fn = reward_fn
        self.env_factory = env_factory
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
        if "sandbox.sessions" in sys.modules:  # the pools of agents' `ctx.session()`s
            await sys.modules["sandbox.sessions"].close_sessions()

    # -- one run --------------------------------------------------------------------------------
    async def _serving(self) -> None:
        if self._server is None:
            self._server = serve_endpoint(self.endpoint)
            self._base_url = await self._server.__aenter__()

    async def _run(self, task: dict, group_id: str, sample: int) -> tuple[list[Trajectory], int]:
        sid = f"{group_id}-{sample}-{uuid.uuid4().hex[:8]}"
        env = None
        error: str | None = None
        tb: str | None = None
        returned: Any = None
        reward: float | None = None
        kind = "agent"  # error_kind of a failure: the agent's, or the env's (env_*)
        async with self._live:
            try:
                messages: tuple[dict, ...] = ()
                if self.env_factory is not None:
                    try:
                        env = self.env_factory()
                        messages = tuple((await reset_env(env, task))[0])
                    except Exception as exc:  # the env's failure, before the agent ran
                        (error, tb), kind = _failure(exc, "resetting the env"), _env_kind(exc)
                model = self.endpoint.model_name
                ctx = AgentContext(self._base_url, sid, task, model, messages, self.endpoint)
                if error is None:
                    returned, error, tb = await self._call_agent(ctx)
                session = self.endpoint.pop_session(sid)
                if error is None and not session.trajectories:
                    error = "the agent made no call with its session header"
                if error is None:
                    try:
                        reward, error = await self._reward(task, returned, session, env)
                    except Exception as exc:  # the env's scoring failed: not the model's 0
                        (error, tb), kind = _failure(exc, "scoring the answer"), _env_kind(exc)
            finally:
                if env is not None:
                    await close_env(env)
        return self._finish(session, task, group_id, sample, reward, error, tb, kind)

    async def _call_agent(self, ctx: AgentContext) -> tuple[Any, str | None, str | None]:
        try:
            return (
                await asyncio.wait_for(self.agent(ctx), self.cfg.trajectory_timeout_s),
                None,
                None,
            )
        except asyncio.TimeoutError:
            return None, f"agent deadline of {self.cfg.trajectory_timeout_s} s exceeded", None
        except Exception as exc:  # the agent's own failure: its trajectory's error
            return None, *_failure(exc, "in the agent")

    def _finish(self, session, task, group_id, sample, reward, error, tb, kind="agent"):
        trajs = session.trajectories or [Trajectory([], task_id=session.session_id)]
        for traj in trajs:
            traj.task_id, traj.group_id = str(task.get("id", "")), group_id
            traj.info.update(
                sample=sample, session_id=session.session_id, prefix_breaks=session.prefix_breaks
            )
            if error is not None:
                traj.status, traj.error, traj.reward = Status.ERROR, error, None
                traj.info["error_kind"] = kind
                if tb is not None:
                    traj.info["traceback"] = tb
            else:
                traj.status, traj.reward = Status.COMPLETE, reward
        return trajs, session.prefix_breaks

    async def _reward(
        self, task: dict, returned: Any, session: Session, env: Any
    ) -> tuple[float | None, str | None]:
        if self.reward_fn is not None:
            value = self.reward_fn(task, returned, session)
        elif env is not None and not _is_number(returned):
            value = await self._env_score(env, returned, session)
        else:
            value = returned
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

    async def _env_score(self, env: Any, returned: Any, session: Session) -> float:
        """The env's reward for the agent's answer: what it returned if a string, else the
        text of the session's last completion; one step that must end the episode."""
        if returned is not None and not isinstance(returned, str):
            raise EnvScoreError(
                f"the agent returned {returned!r}: return a number (the reward), a string (the "
                "answer the env scores) or None (the env scores the last reply)"
            )
        answer = returned if isinstance(returned, str) else None
        if answer is None:
            answer = self.chat.action_text(session.last_completion)
        astep = getattr(env, "astep", None)
        result = await astep(answer) if astep is not None else env.step(answer)
        _, reward, terminated, truncated, _ = checked_step(result)
        if not (terminated or truncated):
            raise EnvScoreError(
                f"{type(env).__name__} did not end its episode on the agent's answer: it needs "
                "more turns than one answer, so return the reward from the agent instead"
            )
        return reward


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _env_kind(exc: BaseException) -> str:
    from envs.errors import InfraError

    return "env_infra" if isinstance(exc, InfraError) else "env_exception"


def _failure(exc: BaseException, where: str) -> tuple[str, str]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return f"{type(exc).__name__} {where}: {exc}", tb
