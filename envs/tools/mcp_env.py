"""McpToolEnv: a tool env whose tools come from an MCP server run in the episode's sandbox session.

    class MathMcpEnv(McpToolEnv):
        def load_tasks(self, split): return [{"id": "0", "a": 2, "b": 3}]
        def initial_messages(self, task): return [{"role": "user", "content": "2 + 3?"}]
        async def final_reward(self, text): return float("5" in (text or ""))

    env = MathMcpEnv(server_command="python3 server.py", server_files="my_server/",
                     backend="bubblewrap")

At `areset` the episode's session opens (envs/tools/session.py), `server_files` (a local
directory: the server and whatever it imports) is uploaded to its workspace, and the server's
tools are listed with MCP `list_tools` (envs/tools/mcp_session.py: each request runs the server
once inside the session) and offered to the model as the chat template's tools, under the names
the server gives them. The model's calls are parsed as for any ToolEnv and dispatched with
`call_tool`; results come back as tool messages. A failed call (`isError`) is the model's: the
error text is its result. A server that cannot start, crashes or hangs, or a session that
breaks, is an InfraError: the trajectory is an error, never a reward of 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.tools.env import ToolEnv
from envs.tools.mcp import McpTools, close_mcp_then_session, tool_from_mcp
from envs.tools.schema import Tool
from envs.tools.session import EpisodeSession

__all__ = ["McpToolEnv"]


class McpToolEnv(ToolEnv):
    uses_sessions = True

    def __init__(
        self,
        server_command: str,
        *,
        server_files: str | Path | None = None,
        backend: str = "auto",
        session_options: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None,
        call_timeout_s: float = 60.0,
        max_turns: int = 4,
        tool_parser: str | None = None,
        max_tool_calls_per_turn: int | None = None,
        max_tool_output_chars: int | None = None,
    ) -> None:
        if not server_command.strip():
            raise ValueError("server_command: the shell command that starts the MCP server")
        if server_files is not None and not Path(server_files).is_dir():
            raise ValueError(f"server_files={str(server_files)!r}: not a local directory")
        self.server_command = server_command
        self.server_files = server_files
        self.limits = dict(limits or {})
        self.call_timeout_s = call_timeout_s
        self.session = EpisodeSession(backend=backend, **(session_options or {}))
        self.mcp: McpTools | None = None
        super().__init__(
            max_turns=max_turns,
            tool_parser=tool_parser,
            max_tool_calls_per_turn=max_tool_calls_per_turn,
            max_tool_output_chars=max_tool_output_chars,
        )

    def _declared_tools(self) -> list[Tool]:
        return []  # listed from the server when the episode starts

    async def on_start(self) -> None:
        from envs.tools.mcp_session import MODERN, session_stdio
        from sandbox import SandboxError, SessionLimits

        ws = await self.session.open(SessionLimits(**self.limits))
        if self.server_files is not None:
            try:
                await ws.upload(self.server_files)
            except (SandboxError, OSError, ValueError) as exc:
                from envs.errors import InfraError

                raise InfraError(f"could not upload the MCP server's files: {exc}") from exc
        transport = session_stdio(ws, self.server_command, timeout_s=self.call_timeout_s)
        self.mcp = McpTools(
            transport, name="MCP server", timeout_s=self.call_timeout_s + 30, mode=MODERN
        )
        listed = await self.mcp.open()
        self._tools = {t.name: tool_from_mcp(t, self.mcp.call) for t in listed}

    async def on_close(self) -> None:
        mcp, self.mcp = self.mcp, None
        await close_mcp_then_session(mcp, self.session)
