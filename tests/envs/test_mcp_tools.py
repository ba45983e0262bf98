"""MCP tools for tool envs (envs/tools/mcp*.py) through the real mcp SDK: a small MCPServer
(the SDK's FastMCP) file run inside the episode's sandbox session, on bubblewrap and docker
(under CI=true a backend that cannot start fails, never skips)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="pip install 'gspo-agents[interop]'")

from envs.errors import InfraError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from site_packages import copy_imported_packages  # noqa: E402

SERVER = Path(__file__).resolve().parent / "vf_tasks" / "mcp_math_server.py"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))
from session_util import SESSION_BACKENDS, started_pool  # noqa: E402


def docs_env_class() -> type:
    """The MathMcpEnv of docs/agents.md ("MCP tools"), run as written."""
    text = (Path(__file__).resolve().parents[2] / "docs/agents.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "McpToolEnv" in b]
    namespace: dict = {}
    exec(compile(block, "docs/agents.md", "exec"), namespace)
    return namespace["MathMcpEnv"]


@pytest.fixture(scope="module")
def server_files(tmp_path_factory) -> Path:
    """The server and the SDK packages it imports (the sandbox image has no mcp; a real
    server's image or files would bring their own)."""
    out = tmp_path_factory.mktemp("mcp-server")
    shutil.copy(SERVER, out / "server.py")
    copy_imported_packages("import mcp.server.mcpserver, mcp.server.stdio", out / ".mcp-site")
    return out


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.slow  # ~25 s a backend on 2 loaded cores: each MCP request starts python in the sandbox
@pytest.mark.parametrize("backend", SESSION_BACKENDS)
async def test_an_mcp_server_in_the_session_gives_the_tools_and_a_crash_is_infra(
    backend, server_files
):
    pool = await started_pool(backend)  # fails under CI=true, skips elsewhere, if it cannot run
    await pool.aclose()
    env = docs_env_class()(
        server_command="PYTHONPATH=/workspace/.mcp-site python3 server.py",
        server_files=server_files,
        backend=backend,
    )
    try:
        messages, _ = await env.areset(options={"task": env.load_tasks("train")[0]})
        assert {s["function"]["name"] for s in env.tool_schemas()} == {"add", "shout", "crash"}
        [add] = [s for s in env.tool_schemas() if s["function"]["name"] == "add"]
        assert add["function"]["parameters"]["required"] == ["a", "b"]
        obs, reward, done, _, _ = await env.astep(call("add", a=2, b=3))
        assert (obs, reward, done) == ([{"role": "tool", "content": "5"}], 0.0, False)
        obs, *_ = await env.astep(call("add", a="two", b=3))  # the model's mistake: shown
        assert obs[0]["content"].startswith("Error:") and "integer" in obs[0]["content"]
        obs, *_ = await env.astep(call("shout", n=1 << 20))  # past the session's output cap
        assert obs[0]["content"].startswith("Error: the tool call was stopped")  # the model's
        assert (await env.astep("It is 5."))[1:3] == (1.0, True)
        await env.areset(options={"task": env.load_tasks("train")[0]})
        with pytest.raises(InfraError, match="exited with code 3"):
            await env.astep(call("crash"))  # never a reward of 0
    finally:
        await env.aclose()
        from sandbox.sessions import close_sessions

        await close_sessions()
