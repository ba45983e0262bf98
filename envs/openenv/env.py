"""OpenEnv-v0: train on any OpenEnv environment (meta-pytorch `openenv-core`) over its `/ws` channel.

    env=openenv env.kwargs.url=http://HOST:PORT
    env=openenv env.kwargs.image=IMAGE [env.kwargs.app=MODULE:APP]

With `image`, the project starts the OpenEnv server image itself, in its sandbox with no network
(envs/openenv/container.py): one container per process, shared by the episodes, reached over a
unix socket; a server that does not start is an InfraError naming the image and its last logs.

Each episode opens one WebSocket session with the real `openenv` client (`GenericEnvClient`):
`reset` (seeded by the task row) gives the observation rendered as the opening user message; the
env's MCP tools (`list_tools`) become the chat template's `tools=`; every tool call the model
writes is sent as a `call_tool` action and its result comes back as a `tool` message; the env's
`reward` and `done` end the episode. A turn without a tool call ends the episode with the last
reward the env gave (0.0 if none). A server that is down, times out or answers an error is an
`InfraError` (the trajectory is dropped, never a reward of 0).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from envs.base import Message, TextEnv
from envs.errors import InfraError
from envs.openenv.container import ServerSpec, live_server, shared_server
from envs.tools.parsers import CallError, get_parser, run_parser

_OBS_SKIP = ("reward", "done", "metadata")


class OpenEnvEnv(TextEnv):
    """A client of one OpenEnv server; task rows are reset seeds (`{"id", "seed"}`)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        image: str | None = None,
        app: str = "server.app:app",
        app_dir: str = "/app/env",
        server_memory_mb: int = 2048,
        server_cpus: float = 1.0,
        server_read_only: bool = True,
        server_start_timeout_s: float = 120.0,
        max_turns: int = 4,
        num_train: int = 64,
        num_test: int = 16,
        tool_parser: str = "hermes",
        timeout_s: float = 60.0,
        max_tool_output_chars: int = 2000,
    ) -> None:
        super().__init__(max_turns=max_turns)
        if bool(url) == bool(image):
            raise ValueError(
                "OpenEnv-v0 needs exactly one of env.kwargs.url=http://HOST:PORT (a running "
                "OpenEnv server) or env.kwargs.image=IMAGE (an OpenEnv server image to start)"
            )
        self.url = url
        self.server_spec = (
            ServerSpec(
                image,
                app=app,
                app_dir=app_dir,
                memory_mb=server_memory_mb,
                cpus=server_cpus,
                read_only=server_read_only,
                start_timeout_s=server_start_timeout_s,
            )
            if image
            else None
        )
        self._where = f"OpenEnv server {url}" if url else f"OpenEnv image {image}"
        self.num_train, self.num_test = num_train, num_test
        self.tool_parser = tool_parser
        self._parse = get_parser(tool_parser)
        self.timeout_s = timeout_s
        self.max_tool_output_chars = max_tool_output_chars
        self._client: Any = None
        self._tools: list[dict[str, Any]] = []
        self._last_reward = 0.0

    # -- data -----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        start, n = (0, self.num_train) if split == "train" else (1_000_000, self.num_test)
        return [{"id": f"{split}-{i}", "seed": start + i} for i in range(n)]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self._tools

    def use_tool_format(self, tool_parser: str) -> None:
        self._parse = get_parser(tool_parser)
        self.tool_parser = tool_parser

    # -- episode --------------------------------------------------------------------------------
    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        return self._opening

    async def _guard(self, what: str, coro: Any) -> Any:
        try:
            return await asyncio.wait_for(coro, self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the server is infrastructure
            raise InfraError(f"{self._where}: {what} failed: {exc!r}") from exc

    async def _send(self, what: str, coro: Any) -> dict[str, Any]:
        result = await self._guard(what, coro)
        return {
            "observation": result.observation,
            "reward": result.reward,
            "done": bool(result.done),
        }

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        await self.aclose()
        task = (options or {}).get("task") or {"id": "seed-0", "seed": seed or 0}
        self._client = await self._new_client()
        await self._guard("connect", self._client.connect())
        out = await self._send("reset", self._client.reset(seed=int(task.get("seed", 0))))
        tools = await self._send("list_tools", self._client.step({"type": "list_tools"}))
        self._tools = [_chat_tool(t) for t in (tools["observation"] or {}).get("tools", [])]
        self._opening = [{"role": "user", "content": _render(out["observation"])}]
        self._last_reward = float(out["reward"] or 0.0)
        self._done = out["done"]
        return super().reset(seed=seed, options={"task": task})

    async def _new_client(self) -> Any:
        if self.server_spec is None:
            return _client_class()(base_url=self.url, message_timeout_s=self.timeout_s)
        # started once, in a thread (seconds); every later episode finds it running
        server = live_server(self.server_spec) or await asyncio.to_thread(
            shared_server, self.server_spec
        )  # InfraError if it does not start
        assert server is not None  # shared_server raises rather than return None
        client = _client_class(server.socket_path)
        return client(base_url="http://openenv", message_timeout_s=self.timeout_s)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return asyncio.run(self.areset(seed=seed, options=options))

    def step(self, action: str):
        raise RuntimeError("OpenEnv-v0 is asynchronous: use `await env.astep(...)`")

    async def astep(self, action: str):
        self._require_task()
        self.turn += 1
        parsed = run_parser(self._parse, str(action), self._tools)
        if not parsed.items or self._done:
            return [], self._last_reward, True, False, self._info(self._last_reward, "final")
        messages: list[Message] = []
        for item in parsed.items:
            if isinstance(item, CallError):
                messages.append({"role": "tool", "content": f"Error: {item.message}"})
                continue
            payload = {"type": "call_tool", "tool_name": item.name, "arguments": item.arguments}
            out = await self._send(f"call_tool {item.name}", self._client.step(payload))
            messages.append({"role": "tool", "content": self._clip(_tool_text(out["observation"]))})
            if out["reward"] is not None:
                self._last_reward = float(out["reward"])
            if out["done"]:
                self._done = True
                reward = self._last_reward
                return [], reward, True, False, self._info(reward, "done")
        if self.turn >= self.max_turns:
            return [], self._last_reward, False, True, self._info(self._last_reward, "turn_limit")
        return messages, 0.0, False, False, self._info(0.0, None)

    def _info(self, reward: float, end: str | None) -> dict[str, Any]:
        info: dict[str, Any] = {"turn": self.turn, "turn_reward": reward}
        if end is not None:
            info["end"] = end
        return info

    def _clip(self, text: str) -> str:
        limit = self.max_tool_output_chars
        return text if len(text) <= limit else text[:limit] + f"[... {len(text) - limit} cut]"

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), self.timeout_s)
            except Exception:  # noqa: BLE001 - closing a dead session must not fail the episode
                pass


def _client_class(unix_socket: str | None = None) -> type:
    """openenv's `GenericEnvClient` without WebSocket keepalive pings: the trainer's event loop
    can be busy longer than the ping timeout (20 s) on a loaded CPU, which closed healthy
    sessions; a dead server is still caught by the per-message timeout (`timeout_s`).
    With `unix_socket`, it connects over that socket (a sandboxed server has no network)."""
    from openenv.core import env_client
    from openenv.core.generic_client import GenericEnvClient
    from websockets.asyncio.client import unix_connect

    class Client(GenericEnvClient):
        async def connect(self) -> Any:
            if self._ws is None:  # type: ignore[has-type]
                options = {
                    "open_timeout": self._connect_timeout,
                    "max_size": self._max_message_size,
                    "ping_interval": None,
                }
                if unix_socket is None:
                    self._ws = await env_client.ws_connect(self._ws_url, **options)
                else:
                    self._ws = await unix_connect(unix_socket, self._ws_url, **options)
            return self

    return Client


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool (name, description, input_schema) as the chat template's function schema."""
    schema = tool.get("input_schema") or tool.get("inputSchema") or {"type": "object"}
    return {
        "type": "function",
        "function": {
            "name": tool.get("name", ""),
            "description": tool.get("description") or "",
            "parameters": schema,
        },
    }


def _render(observation: Any) -> str:
    """An observation as prompt text: its text field if it has one, else its fields as JSON."""
    if isinstance(observation, str):
        return observation
    fields = {k: v for k, v in (observation or {}).items() if k not in _OBS_SKIP}
    for key in ("prompt", "text", "message", "observation", "content"):
        if isinstance(fields.get(key), str):
            return fields[key]
    return json.dumps(fields, default=str)


def _tool_text(observation: dict[str, Any]) -> str:
    """A `call_tool` observation's result (FastMCP's `data`, else its text content)."""
    if observation.get("error"):
        return f"Error: {observation['error'].get('message', observation['error'])}"
    result = observation.get("result")
    if isinstance(result, dict):
        if result.get("data") is not None:
            result = result["data"]
        elif result.get("content"):
            result = "\n".join(str(c.get("text", c)) for c in result["content"])
    return result if isinstance(result, str) else json.dumps(result, default=str)
