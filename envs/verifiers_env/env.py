"""`env=verifiers env.kwargs.id=MODULE`: a verifiers (0.4.0) environment package as an env here.

verifiers 0.4 packages a taskset: a module exporting a `vf.Taskset` subclass whose `load()`
yields `vf.Task`s (a `vf.TaskData` with `prompt`, `system_prompt` and the row's own fields), each
task scored by its `@vf.reward` methods (weighted; the trace's reward is their weighted sum),
recorded by `@vf.metric`s, ended early by `@vf.stop` predicates, and given tools by
`vf.Toolset` MCP servers (`Task.toolsets` / `Taskset.toolsets`). This env loads it with
verifiers' own `load_environment` and drives the episode itself, token-in/token-out, with the
trainer's engine (no OpenAI server in between):

- reset: the task's prompt (system prompt first) as chat messages; the toolsets' tools, served by
  the real MCP server classes verifiers uses (an in-process `MCPServer` per toolset, reached with
  the `mcp` client, names prefixed by the toolset's server name as verifiers does), as the chat
  template's tools.
- each model turn: tool calls are parsed from the model's own format (envs/tools/parsers.py),
  run with MCP `call_tool`, their results returned as tool messages; a turn without calls ends the
  episode; after each turn with calls the task's `@vf.stop(trace)` predicates may end it.
- the end: a `vf.Trace` of the conversation (sampled assistant messages, tool calls and results)
  is scored with `await task.score(trace)`; its `trace.reward` is the reward, its rewards and
  metrics go to info. A rubric that raises, returns a non-number or leaves a reward unscored is
  an infrastructure error (InfraError), never a reward of 0.

What this does not do: verifiers' harnesses (agent programs in containers), its `Env.run`
multi-agent orchestration and user simulators; tasks that need a container (`NEEDS_CONTAINER`)
are refused with the reason.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
from typing import Any

from envs.base import Message
from envs.errors import InfraError, TaskError
from envs.tools.env import ToolEnv
from envs.tools.mcp import McpTools, tool_from_mcp
from envs.tools.parsers import ToolCall, run_parser
from envs.tools.schema import Tool

__all__ = ["DEMO", "VerifiersEnv", "load_verifiers"]

DEMO = "envs.verifiers_env.demo_taskset"  # the taskset of a plain `env=verifiers`


@functools.cache
def load_verifiers(env_id: str, taskset_json: str = "{}") -> tuple[Any, list[Any]]:
    """(the verifiers Env, its tasks) for a taskset id, loaded once per process."""
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ImportError(
            "env=verifiers needs the verifiers package: pip install 'gspo-agents[interop]'"
        ) from exc
    taskset = {**json.loads(taskset_json), "id": _importable(env_id)}
    try:
        env = vf.load_environment(vf.resolve_env_config({"taskset": taskset}))
    except ModuleNotFoundError as exc:
        raise ValueError(
            f"env.kwargs.id={env_id!r}: {exc}. Install the environment package (or put its "
            "module on PYTHONPATH) and pass its module name."
        ) from exc
    tasks = list(env.taskset)
    if not tasks:
        raise ValueError(f"verifiers taskset {env_id!r} loaded no tasks")
    needs = [type(t).__name__ for t in tasks[:1] if getattr(t, "NEEDS_CONTAINER", False)]
    if needs:
        raise ValueError(
            f"verifiers taskset {env_id!r}: its tasks ({needs[0]}) need a container that a "
            "verifiers harness provides; env=verifiers runs tasks that need none"
        )
    return env, tasks


def _importable(env_id: str) -> str:
    """The id to give verifiers' loader, which imports a taskset by its bare module name:
    a dotted module path (`pkg.sub.taskset`) is imported here and made importable under its last
    part."""
    if "." not in env_id or "/" in env_id:
        return env_id
    import importlib
    import sys

    try:
        module = importlib.import_module(env_id)
    except ModuleNotFoundError as exc:
        raise ValueError(f"env.kwargs.id={env_id!r}: {exc}") from exc
    bare = env_id.rsplit(".", 1)[1]
    if sys.modules.setdefault(bare, module) is not module:
        raise ValueError(
            f"env.kwargs.id={env_id!r}: verifiers imports tasksets by bare module name and "
            f"{bare!r} is another module already; rename one of them"
        )
    return bare


class VerifiersEnv(ToolEnv):
    """A verifiers taskset, driven turn by turn here; see the module docstring."""

    def __init__(
        self,
        id: str = DEMO,
        max_turns: int = 4,
        *,
        taskset: dict[str, Any] | None = None,
        tool_parser: str | None = None,
        max_tool_calls_per_turn: int | None = None,
        max_tool_output_chars: int | None = None,
    ) -> None:
        if not id:
            raise ValueError("env=verifiers needs env.kwargs.id=MODULE (a verifiers taskset id)")
        self.vf_env, self.vf_tasks = load_verifiers(id, json.dumps(taskset or {}, sort_keys=True))
        self._toolsets = self._make_toolsets()
        self._servers = [(ts, _mcp_server(ts)) for ts in self._toolsets]
        self._mcp: list[McpTools] = []
        self._messages: list[Any] = []
        self._turn_call_ids: list[str] = []
        super().__init__(
            max_turns=max_turns,
            tool_parser=tool_parser,
            max_tool_calls_per_turn=max_tool_calls_per_turn,
            max_tool_output_chars=max_tool_output_chars,
        )

    # -- tasks ----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        # verifiers tasksets have no splits: train and test are the same tasks
        return [{"id": str(i), "key": t.key} for i, t in enumerate(self.vf_tasks)]

    def _vf_task(self, row: dict[str, Any]) -> Any:
        try:
            return self.vf_tasks[int(row["id"])]
        except (KeyError, ValueError, IndexError) as exc:
            raise TaskError(f"not a task row of this verifiers taskset: {str(row)[:80]}") from exc

    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        data = self._vf_task(task).data
        messages: list[Message] = []
        if data.system_prompt:
            messages.append({"role": "system", "content": data.system_prompt})
        if isinstance(data.prompt, str):
            messages.append({"role": "user", "content": data.prompt})
        else:
            messages += [_plain(m) for m in data.prompt or []]
        if not messages:
            raise TaskError(f"verifiers task {task['id']} has no prompt")
        self._messages = [*_vf_messages(messages)]
        return messages

    # -- tools ----------------------------------------------------------------------------------
    def _make_toolsets(self) -> list[Any]:
        task_cls = type(self.vf_tasks[0])
        taskset = self.vf_env.taskset
        return [
            *task_cls.toolsets(taskset.config.task),
            *type(taskset).toolsets(taskset.config),
        ]

    def _declared_tools(self) -> list[Tool]:
        tools = []
        for toolset, server in self._servers:
            for listed in server._tool_manager.list_tools():  # the schemas MCP list_tools gives
                tools.append(
                    tool_from_mcp(
                        _Listed(listed),
                        self._mcp_call,
                        name=_shown(toolset, listed.name),
                        remote_name=f"{id(server)}:{listed.name}",
                    )
                )
        return sorted(tools, key=lambda t: t.name)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return super().tool_schemas() if self._tools else []

    async def _mcp_call(self, remote: str, **arguments: Any) -> str:
        server_id, _, name = remote.partition(":")
        for (_, server), client in zip(self._servers, self._mcp, strict=True):
            if str(id(server)) == server_id:
                return await client.call(name, **arguments)
        raise InfraError(f"no MCP connection for {remote}")

    async def on_start(self) -> None:
        task = self._vf_task(self._require_task())
        for toolset, server in self._servers:
            try:
                await toolset.setup()
                await toolset.setup_task(task)
            except Exception as exc:
                raise InfraError(f"{type(toolset).__name__} setup failed: {exc}") from exc
            client = McpTools(server, name=f"verifiers toolset {type(toolset).__name__}")
            self._mcp.append(client)
            await client.open()

    async def on_close(self) -> None:
        clients, self._mcp = self._mcp, []
        for client in clients:
            await client.close()

    # -- turns ----------------------------------------------------------------------------------
    async def astep(self, action: str):
        text = action if isinstance(action, str) else str(action)
        self._record_assistant(text)
        if not self._tools:  # no toolsets: single-turn, whatever the text holds
            self._require_task()
            self.turn += 1
            self.counters["turns"] += 1
            reward = float(await self.final_reward(text))
            return [], reward, True, False, self._info(reward, "final_message")
        obs, reward, terminated, truncated, info = await super().astep(text)
        ids = self._turn_call_ids
        self._messages += [
            _tool_message(m, ids[i] if i < len(ids) else f"call_extra_{i}")
            for i, m in enumerate(obs)
        ]
        if terminated or truncated or not obs:
            return obs, reward, terminated, truncated, info
        stopped = await self._stopped()
        if stopped is None:
            return obs, reward, terminated, truncated, info
        reward = float(await self.final_reward(None))
        info = self._info(reward, f"stop:{stopped}")
        return [], reward, True, False, info

    def _record_assistant(self, text: str) -> None:
        from verifiers.v1.types import AssistantMessage
        from verifiers.v1.types import ToolCall as VfCall

        items = run_parser(self._parse, text, self.tool_schemas()).items
        self._turn_call_ids = [f"call_{uuid.uuid4().hex[:12]}" for _ in items]
        calls = [
            VfCall(id=cid, name=c.name, arguments=json.dumps(c.arguments))
            for cid, c in zip(self._turn_call_ids, items, strict=True)
            if isinstance(c, ToolCall)
        ]
        self._messages.append(AssistantMessage(content=text, tool_calls=calls or None))

    async def _stopped(self) -> str | None:
        trace = self._trace()
        for stop in self._vf_task(self._require_task()).hooks("stop"):
            try:
                from verifiers.v1.session import call_hook
                from verifiers.v1.trace import Trace

                result = await call_hook(stop, {Trace: trace})
            except Exception as exc:
                raise InfraError(f"@vf.stop {stop.__name__} raised: {exc}") from exc
            if not isinstance(result, bool):
                raise InfraError(f"@vf.stop {stop.__name__} returned {type(result).__name__}")
            if result:
                return stop.__name__
        return None

    async def final_reward(self, text: str | None) -> float:
        task = self._vf_task(self._require_task())
        trace = self._trace()
        try:
            await task.score(trace)
        except Exception as exc:  # the rubric broke: never a reward of 0
            raise InfraError(f"verifiers rubric of {type(task).__name__} failed: {exc}") from exc
        unscored = sorted(k for k, v in trace.rewards.items() if v is None)
        if unscored:
            raise InfraError(f"verifiers rubric left rewards unscored: {unscored}")
        reward = trace.reward
        if not math.isfinite(reward):
            raise InfraError(f"verifiers rubric gave a non-finite reward {reward!r}")
        self._scores = {
            **{f"reward_{k}": v.score for k, v in trace.rewards.items() if v is not None},
            **{f"metric_{k}": float(v) for k, v in trace.metrics.items() if v is not None},
        }
        return float(reward)

    def final_info(self) -> dict[str, Any]:
        return {"verifiers": dict(getattr(self, "_scores", {}))}

    def _trace(self) -> Any:
        from verifiers.v1.configs.agent import AgentConfig
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask
        from verifiers.v1.types import AssistantMessage

        task = self._vf_task(self._require_task())
        nodes = [
            MessageNode(
                parent=i - 1 if i else None, message=m, sampled=isinstance(m, AssistantMessage)
            )
            for i, m in enumerate(self._messages)
        ]
        return Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=AgentInfo(config=AgentConfig()),
            nodes=nodes,
        )


class _Listed:
    """An mcpserver Tool seen as list_tools would show it (name, description, input_schema)."""

    def __init__(self, tool: Any) -> None:
        self.name = tool.name
        self.description = tool.description
        self.input_schema = tool.parameters


def _mcp_server(toolset: Any) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(toolset.server_name or type(toolset).__name__)
    toolset.register(server)
    return server


def _shown(toolset: Any, name: str) -> str:
    prefix = toolset.server_name
    return f"{prefix}_{name}" if prefix else name


def _plain(message: Any) -> Message:
    from verifiers.v1.types import content_text

    role = message["role"] if isinstance(message, dict) else message.role
    content = message.get("content") if isinstance(message, dict) else message.content
    return {"role": role, "content": content if isinstance(content, str) else content_text(content)}


def _vf_messages(messages: list[Message]) -> list[Any]:
    from verifiers.v1.types import SystemMessage, UserMessage

    kinds = {"system": SystemMessage, "user": UserMessage}
    return [kinds[m["role"]](content=m["content"]) for m in messages if m["role"] in kinds]


def _tool_message(message: Message, call_id: str) -> Any:
    from verifiers.v1.types import ToolMessage

    return ToolMessage(tool_call_id=call_id, content=message["content"])
