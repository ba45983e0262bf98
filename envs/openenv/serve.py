"""Serve any registered env of this project in OpenEnv's protocol (meta-pytorch `openenv-core`).

    python -m envs.openenv serve gspo/Codeforces-v0 --port 8000

Built on openenv's own server (`HTTPEnvServer` and its routes: its `/ws` session channel and
`/health`): every WebSocket session gets its own instance of our env (`envs.make`), so sessions
never share episode state; envs that run code share one sandbox, made when the server starts.

The protocol, as openenv's own clients (`GenericEnvClient`, `MCPToolClient`) speak it:
- `reset` (data: `seed`, or `task_id` and `split`; default split "train") -> an observation with
  `prompt` (the opening user message's text), `messages` (all opening chat messages), `task_id`
  and `tool_names` (the MCP tools below). A seed picks task `seed % len(split)`.
- `step` actions are MCP actions: `{"type": "list_tools"}` lists the tools (name, description,
  input_schema); `{"type": "call_tool", "tool_name": ..., "arguments": {...}}` calls one.
  `submit(answer)` sends `answer` as the model's turn (for Codeforces: the reply holding the
  code block); a tool env's own tools are listed too, and calling one runs it in the episode
  (our env sees the call as the model would have written it; where the env has its own
  `submit` tool, ours is `final_answer`). Every call is one turn of our env (its `max_turns`
  counts them). The step's `reward` and `done` are our env's; `result.data` is the text our
  env answered (tool output or judge feedback, else its verdict message).
- Episodes live on `/ws`: openenv's HTTP `/reset` and `/step` build a fresh env per request, so
  an HTTP `/step` is refused ("step before reset").
- Infrastructure failures (our `InfraError`: the sandbox died, a verifier timed out) come back
  as an error message on `/ws` (`type: "error"`, which openenv's client raises), never as a
  reward of 0. A call to an unknown tool or bad arguments is the policy's fault: a tool error.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, cast

from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    Environment,
    ListToolsAction,
    ListToolsObservation,
    Observation,
    State,
)
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.mcp_types import Tool, ToolError, ToolErrorType

import envs
from envs.base import Message, TextEnv
from envs.tools.parsers import format_call

log = logging.getLogger(__name__)
_closing: set[asyncio.Task] = set()  # env closes scheduled from openenv's sync close()

SUBMIT_DESCRIPTION = (
    "Send your answer (your whole reply, e.g. the message holding your code block) as your turn; "
    "the environment scores it."
)


class TextObservation(Observation):
    """The opening of an episode: the prompt and the chat messages our env starts with."""

    prompt: str = ""
    messages: list[dict[str, Any]] = []
    task_id: str = ""
    tool_names: list[str] = []  # not `tools`: MCPToolClient reads that as a tool listing


class ServedEnv(Environment):
    """One OpenEnv session around one instance of our env."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session builds its own env instance

    def __init__(
        self, make: Callable[[], TextEnv], tasks: dict[str, list[dict[str, Any]]] | None = None
    ) -> None:
        super().__init__()
        self._make = make
        self.env = make()  # a fresh one per episode: our envs are built one per trajectory
        self._tasks = tasks if tasks is not None else {}  # split -> rows, shared by the sessions
        self._closed = False
        self._state = State(episode_id=None, step_count=0)
        self._done = True
        self._started = False

    # -- tools ----------------------------------------------------------------------------------
    def _env_tools(self) -> list[dict[str, Any]]:
        schemas = getattr(self.env, "tool_schemas", None)
        return [s.get("function", s) for s in schemas()] if callable(schemas) else []

    def submit_name(self) -> str:
        names = {t["name"] for t in self._env_tools()}
        return "submit" if "submit" not in names else "final_answer"

    def tools(self) -> list[Tool]:
        submit = Tool(
            name=self.submit_name(),
            description=SUBMIT_DESCRIPTION,
            input_schema={
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "your reply"}},
                "required": ["answer"],
            },
        )
        own = [
            Tool(
                name=t["name"],
                description=t.get("description") or "",
                input_schema=t.get("parameters") or {"type": "object", "properties": {}},
            )
            for t in self._env_tools()
        ]
        return [*own, submit]

    # -- episode --------------------------------------------------------------------------------
    def _task(self, seed: int | None, task_id: str | None, split: str) -> dict[str, Any] | None:
        if seed is None and task_id is None:
            return None  # our env draws one from the train split with its own RNG
        if split not in self._tasks:
            self._tasks[split] = self.env.load_tasks(split)
        tasks = self._tasks[split]
        if not tasks:
            raise ValueError(f"{type(self.env).__name__} has no tasks in split {split!r}")
        if task_id is not None:
            found = [t for t in tasks if str(t.get("id")) == str(task_id)]
            if not found:
                ids = ", ".join(str(t.get("id")) for t in tasks[:10])
                raise ValueError(f"no task {task_id!r} in split {split!r} (ids: {ids}, ...)")
            return found[0]
        return tasks[int(seed or 0) % len(tasks)]

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        split: str = "train",
        **kwargs: Any,
    ) -> TextObservation:
        if self._started:  # a new episode in the same session: a new env, the old one closed
            await self._close_env()
            self.env = await asyncio.to_thread(self._make)
        task = self._task(seed, task_id, split)
        options = {"task": task} if task is not None else None
        areset = getattr(self.env, "areset", None)
        if callable(areset):
            messages, info = await areset(seed=seed, options=options)
        else:
            messages, info = self.env.reset(seed=seed, options=options)
        self._started, self._done = True, False
        self._state = State(episode_id=episode_id or info.get("task_id"), step_count=0)
        return TextObservation(
            prompt=_last_user_text(messages),
            messages=list(messages),
            task_id=str(info.get("task_id", "")),
            tool_names=[t.name for t in self.tools()],
            done=False,
            reward=None,
            metadata=_jsonable(info),
        )

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        raise RuntimeError("the served env is asynchronous: the /ws handler calls reset_async")

    async def step_async(
        self, action: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=self.tools())
        if not isinstance(action, CallToolAction):
            raise TypeError(f"unsupported action {type(action).__name__}: send call_tool")
        if not self._started:
            raise RuntimeError("step before reset: send a reset message first")
        if self._done:
            raise RuntimeError("the episode is over: send reset to start a new one")
        name, arguments = action.tool_name, dict(action.arguments)
        if name == self.submit_name():
            if set(arguments) != {"answer"} or not isinstance(arguments["answer"], str):
                return _tool_error(name, ToolErrorType.INVALID_ARGS, "submit takes answer: str")
            text = arguments["answer"]
        elif name in {t["name"] for t in self._env_tools()}:
            text = format_call(name, arguments, getattr(self.env, "tool_parser", "hermes"))
        else:
            known = ", ".join(t.name for t in self.tools())
            return _tool_error(name, ToolErrorType.TOOL_NOT_FOUND, f"unknown tool; tools: {known}")
        # InfraError (and any other failure of our env) propagates: openenv's /ws handler sends
        # it as an error message, which the client raises; it is never a reward.
        messages, reward, terminated, truncated, info = await self.env.astep(text)
        self._state.step_count += 1
        self._done = bool(terminated or truncated)
        reply = "\n".join(str(m.get("content", "")) for m in messages)
        if not reply and self._done:
            reply = str(info.get("message") or f"episode over, reward {float(reward)}")
        return CallToolObservation(
            tool_name=name,
            result={"content": [{"type": "text", "text": reply}], "data": reply, "is_error": False},
            done=self._done,
            reward=float(reward),
        )

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise RuntimeError("the served env is asynchronous: the /ws handler calls step_async")

    @property
    def state(self) -> State:
        return self._state

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._close_env()

    async def _close_env(self) -> None:
        aclose = getattr(self.env, "aclose", None)
        if callable(aclose):
            await aclose()
        else:
            await asyncio.to_thread(self.env.close)

    def close(self) -> None:
        """openenv's sync close: a no-op after `aclose` (the /ws path, see `_Server`); from the
        stateless HTTP /reset handler (on the event loop) the async close is scheduled."""
        if self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.aclose())
            return
        task = loop.create_task(self.aclose())
        _closing.add(task)
        task.add_done_callback(_closing.discard)


def _tool_error(name: str, kind: ToolErrorType, message: str) -> CallToolObservation:
    return CallToolObservation(
        tool_name=name, result=None, error=ToolError(error_type=kind, message=message)
    )


def _last_user_text(messages: list[Message]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    return str((users or messages or [{"content": ""}])[-1].get("content", ""))


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class _Server(HTTPEnvServer):
    """openenv's server, closing our env's async resources (sandbox sessions, clients) when a
    session ends: openenv calls the sync `close()` from a worker thread, where an async env's
    `aclose()` cannot be awaited."""

    async def _cleanup_session_resources(self, env: Any, executor: Any, stack: Any = None) -> None:
        if isinstance(env, ServedEnv):
            try:
                await env.aclose()
            except Exception as exc:  # noqa: BLE001 - a failed close must not kill the server
                log.warning("closing a session's env: %r", exc)
        await super()._cleanup_session_resources(env, executor, stack)


def build_app(
    env_id: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    sandbox_backend: str = "auto",
    max_sessions: int = 16,
) -> Any:
    """The FastAPI app serving `env_id`; raises `envs.errors.UnknownEnv` for an unknown id."""
    from fastapi import FastAPI

    resolved = envs.resolve_id(env_id)
    kwargs = dict(env_kwargs or {})
    sandbox = None
    if getattr(envs.env_class(resolved), "needs_sandbox", False) and "sandbox" not in kwargs:
        from sandbox import Sandbox

        sandbox = Sandbox.create(
            cast(Any, sandbox_backend), max_concurrency=max(1, min(max_sessions, 4))
        )
        log.info("serving %s with the %s sandbox backend", resolved, sandbox.backend_name)
        kwargs["sandbox"] = sandbox

    tasks: dict[str, list[dict[str, Any]]] = {}

    def factory() -> ServedEnv:
        return ServedEnv(lambda: envs.make(resolved, **kwargs), tasks)

    app = FastAPI(title=f"{resolved} (gspo-agents) in OpenEnv's protocol")
    server = _Server(factory, CallToolAction, CallToolObservation, max_concurrent_envs=max_sessions)
    server.register_routes(app)
    app.state.sandbox_backend = sandbox.backend_name if sandbox is not None else None
    if sandbox is not None:
        app.router.add_event_handler("shutdown", sandbox.aclose)
    return app
