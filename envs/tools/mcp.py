"""Tools from an MCP server (the `mcp` SDK, `pip install 'gspo-agents[interop]'`).

    tools = McpTools(server)           # anything mcp.client.Client takes: an MCPServer
                                       # (in-process) or a Transport (stdio, ...)
    listed = await tools.open()        # envs.tools.Tool records: list_tools, mapped to the
                                       # chat template's OpenAI-style schemas
    text = await tools.call("add", a=1, b=2)   # call_tool; the result rendered as text
    await tools.close()                # idempotent; on every exit path

The client's connection is entered and left inside one task of its own (the SDK's anyio scopes
must be exited by the task that entered them, and the rollout manager resets, steps and closes
an env from different tasks); calls from any task go through it.

Failures: a server that cannot start, dies, or stops answering raises InfraError (the trajectory
is an error, never a reward of 0). A call the server reports as failed (`isError`: bad arguments,
a tool that raised) is the model's doing: ToolError, shown to the model as the call's result.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from envs.errors import InfraError
from envs.tools.env import ToolError
from envs.tools.schema import Tool

__all__ = ["McpTools", "close_mcp_then_session", "render_result", "tool_from_mcp"]


def tool_from_mcp(
    listed: Any, call: Any, *, name: str | None = None, remote_name: str | None = None
) -> Tool:
    """Our Tool for one MCP tool (`mcp.types.Tool`): its input schema as the function's
    parameters; calling it runs `call(remote_name, **arguments)`."""
    params = dict(listed.input_schema or {})
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    params.setdefault("required", [])
    params.pop("title", None)
    shown = name or listed.name
    schema = {
        "type": "function",
        "function": {
            "name": shown,
            "description": listed.description or "",
            "parameters": params,
        },
    }
    return Tool(shown, functools.partial(call, remote_name or listed.name), schema, True)


def render_result(result: Any) -> str:
    """A CallToolResult as the text of a tool message: its text blocks, else its structured
    content as JSON, else a note of the non-text blocks it held."""
    texts = [block.text for block in result.content if getattr(block, "type", "") == "text"]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, default=str)
    kinds = sorted({getattr(block, "type", "?") for block in result.content})
    return f"(no text output; {', '.join(kinds)} content)" if kinds else "(no output)"


class McpTools:
    """One MCP client connection for one episode (see the module docstring)."""

    def __init__(
        self,
        server: Any,
        *,
        name: str = "MCP server",
        timeout_s: float = 60.0,
        mode: str = "auto",
    ) -> None:
        self.server = server
        self.name = name
        self.mode = (
            mode  # the SDK's `mode=`: "auto" (discover, else the legacy handshake), a version
        )
        self.timeout_s = timeout_s
        self.client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def open(self) -> list[Any]:
        """Connect and list the server's tools (`mcp.types.Tool`)."""
        await self.close()
        self._stop = asyncio.Event()
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._serve(ready))
        try:
            self.client = await asyncio.wait_for(ready, self.timeout_s)
            listed = await asyncio.wait_for(self.client.list_tools(), self.timeout_s)
        except (asyncio.CancelledError, InfraError):
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise InfraError(f"{self.name}: could not list its tools: {_why(exc)}") from exc
        return list(listed.tools)

    async def _serve(self, ready: asyncio.Future[Any]) -> None:
        from mcp.client import Client

        try:
            client_cm = Client(self.server, read_timeout_seconds=self.timeout_s, mode=self.mode)
            async with client_cm as client:
                if ready.done():  # open() gave up waiting
                    return
                ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(
                    InfraError(f"{self.name} did not start: {_why(exc)}")
                    if isinstance(exc, Exception)
                    else exc
                )
            if not isinstance(exc, Exception):
                raise

    async def call(self, name: str, **arguments: Any) -> str:
        if self.client is None:
            raise RuntimeError(f"{self.name}: call {name!r} before open()")
        if self._task is not None and self._task.done():
            raise InfraError(f"{self.name} is gone (its connection ended)")
        try:
            result = await asyncio.wait_for(self.client.call_tool(name, arguments), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the transport or the server broke, not the model
            raise InfraError(f"{self.name} failed on {name}: {_why(exc)}") from exc
        text = render_result(result)
        if result.is_error:
            raise ToolError(text)
        return text

    async def close(self) -> None:
        task, self._task, self.client = self._task, None, None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), self.timeout_s)
        except asyncio.TimeoutError:
            task.cancel()
            await asyncio.wait([task])
        except Exception:  # noqa: BLE001 - a server that died already; nothing left to close
            pass


def _why(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)  # anyio/ExceptionGroup: the first real cause
    if inner:
        return _why(inner[0])
    return f"{type(exc).__name__}: {exc}"


async def close_mcp_then_session(mcp: McpTools | None, session: Any) -> None:
    """An episode's end for a tool env with MCP tools: the client first (its server runs in the
    session), then the session, whatever the client's close raised."""
    try:
        if mcp is not None:
            await mcp.close()
    finally:
        await session.close()
