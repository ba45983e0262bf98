"""env=verifiers through the real verifiers 0.4.0 package, and MCP tools through the real mcp SDK.

The tasksets in tests/envs/vf_tasks are written as `vf init` scaffolds them: vf_say_word
(single-turn, two weighted @vf.reward methods), vf_calculator (a vf.Toolset tool server, a
@vf.metric and a @vf.stop), vf_broken_rubric (a reward that raises).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1", reason="pip install 'gspo-agents[interop]'")

import envs  # noqa: E402
from envs.errors import InfraError  # noqa: E402
from envs.tools.mcp import McpTools  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TASKS = Path(__file__).resolve().parent / "vf_tasks"
sys.path.insert(0, str(TASKS))
sys.path.insert(0, str(ROOT / "tests"))
from doc_recipes import metrics_rows, readme_python_block  # noqa: E402


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


async def test_single_turn_reward_is_the_weighted_rubric():
    env = envs.make("verifiers", id="vf_say_word")
    rows = env.load_tasks("train")
    assert len(rows) == 4 and env.tool_schemas() == []
    messages, _ = await env.areset(options={"task": rows[1]})
    assert messages == [{"role": "user", "content": "Write the word dog."}]
    # a tool call in a single-turn task is just text: the episode ends, scored
    obs, reward, done, truncated, info = await env.astep("dog " + call("x"))
    assert (obs, done, truncated) == ([], True, False)
    short = 1.0 - min(len("dog " + call("x")), 400) / 400
    assert reward == pytest.approx(1.0 + 0.5 * short)
    assert info["verifiers"]["reward_says_the_word"] == 1.0
    await env.areset(options={"task": rows[1]})
    assert (await env.astep("cat"))[1] == pytest.approx(0.5 * (1 - 3 / 400))
    await env.aclose()


async def test_toolset_tools_run_over_mcp_and_the_stop_ends_the_episode():
    env = envs.make("verifiers", id="vf_calculator")
    [schema] = env.tool_schemas()
    assert schema["function"]["name"] == "calc_add"
    assert schema["function"]["parameters"]["required"] == ["a", "b"]
    row = env.load_tasks("train")[0]  # 2 + 3
    try:
        await env.areset(options={"task": row})
        obs, reward, done, _, _ = await env.astep(call("calc_add", a=2, b=3))
        assert (obs, reward, done) == ([{"role": "tool", "content": "5"}], 0.0, False)
        obs, *_ = await env.astep(call("calc_add", a="two", b=3))  # the model's mistake
        assert obs[0]["content"].startswith("Error:") and "integer" in obs[0]["content"]
        obs, reward, done, _, info = await env.astep(call("calc_add", a=1, b=1))
        assert (obs, reward, done) == ([], 0.0, True)  # @vf.stop after three tool results
        assert info["end"] == "stop:three_calls"
        assert info["verifiers"]["metric_tool_calls"] == 3.0
        await env.areset(options={"task": row})
        await env.astep(call("calc_add", a=2, b=3))
        assert (await env.astep("The sum is 5."))[1:3] == (1.0, True)
    finally:
        await env.aclose()


async def test_a_rubric_that_raises_is_an_infrastructure_error_not_reward_0():
    env = envs.make("verifiers", id="vf_broken_rubric")
    await env.areset(options={"task": env.load_tasks("train")[0]})
    with pytest.raises(InfraError, match="grading service is down"):
        await env.astep("anything")


def test_an_unknown_taskset_names_the_fix():
    with pytest.raises(ValueError, match="env.kwargs.id='no_such_taskset'.*PYTHONPATH"):
        envs.make("verifiers", id="no_such_taskset")


def _stdio(script: str):
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=[str(TASKS / script)])


async def test_a_stdio_mcp_server_lists_calls_and_a_crash_is_infra():
    from mcp.client.stdio import stdio_client

    params = _stdio("mcp_math_server.py")
    tools = McpTools(stdio_client(params), name="math server", timeout_s=20)
    try:
        listed = {t.name for t in await tools.open()}
        assert listed == {"add", "shout", "crash"}
        assert await tools.call("add", a=40, b=2) == "42"
        with pytest.raises(InfraError, match="math server"):
            await tools.call("crash")
    finally:
        await tools.close()


@pytest.mark.slow  # two real (tiny) trainings, ~25 s each on 2 cores
def test_the_readmes_verifiers_example_trains_two_steps(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", readme_python_block("env=verifiers")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TASKS}"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metrics_rows(tmp_path / "runs/vf")
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["num_signal_seqs"] for r in rows) > 0  # the rubric's spread moved the policy
    assert all(0 <= r["rollout/reward_mean"] <= 1.5 for r in rows)  # the weighted rubric
    assert all(r["rollout/error"] == 0 for r in rows)


@pytest.mark.slow  # a real (tiny) training, ~25 s on 2 cores
def test_a_verifiers_tool_taskset_trains_two_steps(tmp_path):
    code = (
        "from gspo_agents import Trainer; Trainer('env=verifiers', 'env.kwargs.id=vf_calculator',"
        " 'trainer.steps=2', 'trainer.run_dir=runs/calc').fit()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TASKS}"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metrics_rows(tmp_path / "runs/calc")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout/error"] == 0 for r in rows)  # the toolset's MCP server held up
    assert "env: verifiers (4 tasks)" in proc.stderr
