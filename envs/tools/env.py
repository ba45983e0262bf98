"""ToolEnv: a TextEnv whose actions are tool calls, parsed from the model's own text.

A subclass declares tools as typed methods marked `@tool` (async allowed); their OpenAI-style
schemas go to the chat template's `tools=` (see `tool_schemas`). Each assistant turn is handled so:

- the turn contains tool calls (in the format of `tool_parser`, Qwen3/Hermes by default, or
  Qwen3-Coder's XML; calls written while reasoning, inside `<think>`, are never run): each
  runs in order and its result comes back as one `tool` message. A call that cannot be parsed, an
  unknown tool, arguments that do not fit the signature, calls past `max_tool_calls_per_turn` and
  a tool that raises `ToolError` each give an error message in place of a result: the model sees
  what was wrong, the episode goes on, nothing crashes. A tool may end the episode
  (`self.end_episode()`, e.g. `submit`): the reward is then `await self.final_reward(None)`.
- the turn has no tool call: the episode ends with `await self.final_reward(text)`.
- the last allowed turn made calls but did not end the episode: truncated, with `final_reward`.

`envs.errors.InfraError` raised by a tool (a sandbox that died) propagates: the trajectory is an
error, never a reward of 0. Any other exception from a tool is reported to the model as a failed
call and counted in `tool_errors` (a hostile policy must not be able to crash the trainer).

Per-episode counters go in every step's `info["env_metrics"]` (the rollout manager averages them
into `rollout/env/*`): turns, tool_calls, tool_call_attempts, parse_failures, tool_errors,
parse_ok_frac. Episode state that must persist across turns (a shell, a Python kernel, files)
lives in a sandbox session opened in `on_start` and closed in `on_close` (see `aclose`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from envs.base import Message, TextEnv
from envs.errors import InfraError
from envs.tools.parsers import CallError, ToolCall, get_parser, run_parser
from envs.tools.schema import ArgumentError, Tool

__all__ = ["ToolEnv", "ToolError", "tool"]

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__gspo_tool_name__"


class ToolError(Exception):
    """Raised by a tool for a mistake of the model's (a missing file, a bad edit): the message is
    shown to the model as the call's result."""


def tool(fn: F | None = None, *, name: str | None = None) -> Any:
    """Mark a method of a ToolEnv as a tool: `@tool` or `@tool(name="bash")`."""

    def mark(f: F) -> F:
        setattr(f, _MARK, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


_COUNTERS = ("turns", "tool_calls", "tool_call_attempts", "parse_failures", "tool_errors")


class ToolEnv(TextEnv):
    """Base class of tool-calling envs; see the module docstring for the turn contract."""

    tool_parser: str = "hermes"
    max_tool_calls_per_turn: int = 4
    max_tool_output_chars: int = 2000

    def __init__(
        self,
        max_turns: int = 4,
        *,
        tool_parser: str | None = None,
        max_tool_calls_per_turn: int | None = None,
        max_tool_output_chars: int | None = None,
        tools: list[str] | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns)
        self.tool_parser = tool_parser or self.tool_parser
        self._parse = get_parser(self.tool_parser)  # unknown names fail here, listing the known
        self.max_tool_calls_per_turn = max_tool_calls_per_turn or self.max_tool_calls_per_turn
        self.max_tool_output_chars = max_tool_output_chars or self.max_tool_output_chars
        if self.max_tool_calls_per_turn < 1 or self.max_tool_output_chars < 1:
            raise ValueError("max_tool_calls_per_turn and max_tool_output_chars must be >= 1")
        self._tools = {t.name: t for t in self._declared_tools()}
        if tools is not None:  # a subset offered to the model (e.g. to keep a CPU prompt short)
            unknown = sorted(set(tools) - set(self._tools))
            if unknown or not tools:
                raise ValueError(
                    f"tools={list(tools)}: {unknown or 'empty'}; this env's tools are "
                    f"{sorted(self._tools)}"
                )
            self._tools = {name: t for name, t in self._tools.items() if name in tools}
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self._ended = False
        self._sync_loop: asyncio.AbstractEventLoop | None = None  # plain Gymnasium use only
        self._sync_started = False

    # -- tools ----------------------------------------------------------------------------------
    def _declared_tools(self) -> list[Tool]:
        tools = []
        for attr in dir(type(self)):
            member = getattr(type(self), attr, None)
            name = getattr(member, _MARK, None)
            if name is not None:
                tools.append(Tool.from_callable(getattr(self, attr), name=name))
        if not tools:
            raise TypeError(f"{type(self).__name__} declares no tools (mark methods with @tool)")
        return sorted(tools, key=lambda t: t.name)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self._tools.values()]

    def use_tool_format(self, tool_parser: str) -> None:
        """Parse the model's calls with this registered parser from now on (the trainer sets the
        format the model's chat template teaches, `rollout.tool_format`)."""
        self._parse = get_parser(tool_parser)
        self.tool_parser = tool_parser

    def end_episode(self) -> None:
        """Called by a tool (e.g. `submit`): the episode ends after this turn's calls."""
        self._ended = True

    # -- hooks for subclasses -------------------------------------------------------------------
    async def on_start(self) -> None:
        """Set up episode state (e.g. open a sandbox session); called by `areset`."""

    async def final_reward(self, text: str | None) -> float:
        """The episode's reward: `text` is the final message (None when a tool or the turn limit
        ended it)."""
        return 0.0

    def final_info(self) -> dict[str, Any]:
        """Extra info for the terminating step (e.g. the verifier's verdict)."""
        return {}

    async def on_close(self) -> None:
        """Release episode state; called by `aclose` on every exit path."""

    # -- episode --------------------------------------------------------------------------------
    # The trainer drives a ToolEnv asynchronously: `areset` (opens the session), `astep`,
    # `aclose`. Plain Gymnasium code may use `reset` / `step` / `close` instead: they run the same
    # coroutines on an event loop private to this env, and the session opens at the first `step`,
    # so a `reset` that only renders the prompt (cold-start SFT, the context-size check) starts
    # nothing.
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self._sync_started:  # the previous plain-Gymnasium episode's session
            self._run_sync(self.on_close())
            self._sync_started = False
        return self._new_episode(seed, options)

    def _new_episode(self, seed: int | None, options: dict[str, Any] | None):
        messages, info = super().reset(seed=seed, options=options)
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self._ended = False
        return messages, info

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        out = self._new_episode(seed, options)
        await self.on_start()
        return out

    def step(self, action: str):
        if not self._sync_started:
            self._require_task()
            self._run_sync(self.on_start())
            self._sync_started = True
        return self._run_sync(self.astep(action))

    def _run_sync(self, coro: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError(
                f"{type(self).__name__}: reset/step/close inside an event loop; use "
                "`await env.areset(...)`, `await env.astep(...)` and `await env.aclose()`"
            )
        if self._sync_loop is None:
            self._sync_loop = asyncio.new_event_loop()
        return self._sync_loop.run_until_complete(coro)

    async def astep(self, action: str):
        self._require_task()
        self.turn += 1
        self.counters["turns"] += 1
        text = action if isinstance(action, str) else str(action)
        parsed = run_parser(self._parse, text, self.tool_schemas())
        if not parsed.items:
            reward = float(await self.final_reward(text))
            return [], reward, True, False, self._info(reward, "final_message")
        messages = await self._run_calls(parsed.items)
        if self._ended:
            reward = float(await self.final_reward(None))
            return [], reward, True, False, self._info(reward, "ended_by_tool")
        if self.turn >= self.max_turns:
            reward = float(await self.final_reward(None))
            return [], reward, False, True, self._info(reward, "turn_limit")
        return messages, 0.0, False, False, self._info(0.0, None)

    def _info(self, reward: float, end: str | None) -> dict[str, Any]:
        c = self.counters
        attempts = c["tool_call_attempts"]
        metrics = {k: float(v) for k, v in c.items()}
        if attempts:  # no attempts, no fraction: the step mean covers episodes that tried
            metrics["parse_ok_frac"] = 1.0 - c["parse_failures"] / attempts
        info: dict[str, Any] = {"turn": self.turn, "turn_reward": reward, "env_metrics": metrics}
        if end is not None:
            info["end"] = end
            info.update(self.final_info())
        return info

    async def _run_calls(self, items: list[ToolCall | CallError]) -> list[Message]:
        messages: list[Message] = []
        limit = self.max_tool_calls_per_turn
        self.counters["tool_call_attempts"] += len(items)
        for item in items[:limit]:
            if isinstance(item, CallError):
                self.counters["parse_failures"] += 1
                messages.append(_tool_message(f"Error: {item.message}"))
                continue
            self.counters["tool_calls"] += 1
            messages.append(_tool_message(await self._call(item)))
            if self._ended:
                return messages  # calls after the one that ended the episode are not run
        if len(items) > limit:
            self.counters["tool_errors"] += len(items) - limit
            messages.append(
                _tool_message(
                    f"Error: too many tool calls in one turn ({len(items)}); at most {limit} run "
                    f"per turn, the last {len(items) - limit} were not run."
                )
            )
        return messages

    async def _call(self, call: ToolCall) -> str:
        found = self._tools.get(call.name)
        if found is None:
            self.counters["tool_errors"] += 1
            return f"Error: unknown tool {call.name!r}; available: {', '.join(self._tools)}"
        try:
            arguments = found.bind(call.arguments)
            result = found.fn(**arguments)
            if found.is_async:
                result = await result
        except (ArgumentError, ToolError) as exc:
            self.counters["tool_errors"] += 1
            return f"Error: {exc}"
        except (InfraError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - the model must not be able to crash the env
            self.counters["tool_errors"] += 1
            log.warning("tool %s raised %s: %s", call.name, type(exc).__name__, exc)
            return f"Error: {call.name} failed: {type(exc).__name__}: {exc}"
        return self._clip(result if isinstance(result, str) else json.dumps(result, default=str))

    def _clip(self, text: str) -> str:
        limit = self.max_tool_output_chars
        if len(text) <= limit:
            return text
        return f"[... {len(text) - limit} characters cut ...]\n" + text[-limit:]

    # -- lifecycle ------------------------------------------------------------------------------
    async def aclose(self) -> None:
        await self.on_close()

    def close(self) -> None:
        """Plain Gymnasium `close`: the session of a `step`-driven episode and this env's loop."""
        if self._sync_loop is None:  # never stepped through `step`: nothing of ours is open
            return
        try:
            # also after a reset ended the episode: aclose closes what the env owns (CodeAgent's
            # grading sandbox), whose processes would otherwise outlive this loop
            self._run_sync(self.aclose())
            from sandbox.sessions import close_sessions  # the pools made on this env's loop

            self._run_sync(close_sessions())
        finally:
            self._sync_started = False
            loop, self._sync_loop = self._sync_loop, None
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _tool_message(content: str) -> Message:
    return {"role": "tool", "content": content}
