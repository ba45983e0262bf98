"""CodeAgent with `mcp_server=`: the tools of an MCP stdio server run inside the episode's own
sandbox session join CodeAgent's (docker and bubblewrap; CI=true fails without them)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="pip install 'gspo-agents[interop]'")

from test_mcp_tools import call, server_files  # noqa: E402, F401 - the server and its SDK

from envs.codeagent.env import CodeAgentEnv  # noqa: E402
from envs.errors import InfraError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))
from session_util import SESSION_BACKENDS, started_pool  # noqa: E402

SERVER = "PYTHONPATH=/workspace/.mcp/.mcp-site python3 /workspace/.mcp/server.py"


def test_mcp_server_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="mcp_server"):
        CodeAgentEnv(mcp_server="  ")
    with pytest.raises(ValueError, match="not a local directory"):
        CodeAgentEnv(mcp_server="python3 s.py", mcp_files=str(tmp_path / "nope"))


@pytest.mark.slow  # each MCP request starts python (and the SDK) inside the session
@pytest.mark.parametrize("backend", SESSION_BACKENDS)
async def test_codeagent_gets_the_mcp_servers_tools_in_its_session(backend, server_files):  # noqa: F811
    pool = await started_pool(backend)  # fails under CI=true, skips elsewhere, if it cannot run
    await pool.aclose()
    env = CodeAgentEnv(
        tools=["str_replace", "submit"],
        mcp_server=SERVER,
        mcp_files=str(server_files),
        backend=backend,
        exec_timeout_s=60.0,
        session_cpu_s=300.0,
    )
    task = env.load_tasks("train")[0]
    try:
        for _ in range(2):  # a second episode: the server's tools again, listed afresh
            await env.areset(options={"task": task})
            names = sorted(s["function"]["name"] for s in env.tool_schemas())
            assert names == ["add", "crash", "shout", "str_replace", "submit"]
        obs, reward, done, _, _ = await env.astep(call("add", a=2, b=3))
        assert (obs, reward, done) == ([{"role": "tool", "content": "5"}], 0.0, False)
        r = await env.session.require().exec("ls /workspace/.mcp; pwd")
        assert "server.py" in r.stdout and r.stdout.endswith("/workspace/repo\n")
        with pytest.raises(InfraError, match="exited with code 3"):
            await env.astep(call("crash"))  # the server's failure is infra, never a 0
    finally:
        await env.aclose()
        from sandbox.sessions import close_sessions

        await close_sessions()
    assert env.mcp is None


def test_the_docs_command_gives_codeagent_its_server(tmp_path, monkeypatch):
    """docs/agents.md's `env=codeagent +env.kwargs.mcp_server=...` composes into these kwargs."""
    import shlex

    from gspo_agents import Trainer

    text = (Path(__file__).resolve().parents[2] / "docs/agents.md").read_text()
    [argv] = [
        shlex.split(b.replace("\\\n", " "))
        for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        if "mcp_server" in b
    ]
    python, module, *overrides = argv
    assert (python, module) == ("python", "-m") and overrides[0] == "gspo_agents.train"
    (tmp_path / "my_server").mkdir()
    monkeypatch.chdir(tmp_path)
    kwargs = dict(Trainer(*overrides[1:]).config.env.kwargs)
    assert kwargs["mcp_server"] == SERVER.replace("/.mcp-site", "")
    env = CodeAgentEnv(mcp_server=kwargs["mcp_server"], mcp_files=kwargs["mcp_files"])
    assert env.mcp_files == "my_server/"
