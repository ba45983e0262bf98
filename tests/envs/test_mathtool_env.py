"""MathTool-v0 with the real sandbox: code runs, its output comes back, the answer is verified."""

from __future__ import annotations

import os

import pytest

import envs
from envs.errors import InfraError
from envs.math.verify import VerifierPool
from envs.mathtool import MathToolEnv

TASK = {
    "id": "sq",
    "question": "What is 123456789 squared, divided by 3?",
    "answer": "5080526250063507",
}


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(max_workers=1)
    yield p
    p.close()


@pytest.fixture
async def sandbox():
    try:
        from sandbox import Sandbox, SandboxUnavailable

        sb = Sandbox.create("auto")
    except (ImportError, SandboxUnavailable) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"MathTool-v0 needs a working sandbox in CI: {exc}")
        pytest.skip(f"no sandbox here: {exc}")
    try:
        yield sb
    finally:
        await sb.aclose()


def code(src: str) -> str:
    return f"Let me compute.\n```python\n{src}\n```\n"


async def test_code_output_returns_and_the_final_answer_is_verified(pool, sandbox):
    env = envs.make("mathtool", pool=pool, sandbox=sandbox, max_turns=3)
    messages, _ = env.reset(options={"task": TASK})
    assert "```python" in messages[0]["content"]

    obs, reward, terminated, truncated, info = await env.astep(code("print(123456789**2 // 3)"))
    assert (reward, terminated, truncated, info["tool_verdict"]) == (0.0, False, False, "OK")
    assert obs[0]["role"] == "user" and "5080526250063507" in obs[0]["content"]

    obs, reward, terminated, truncated, info = await env.astep(
        "So the answer is \\boxed{5080526250063507}."
    )
    assert (obs, reward, terminated, truncated, info["correct"]) == ([], 1.0, True, False, True)


async def test_errors_and_timeouts_are_shown_to_the_model(pool, sandbox):
    env = MathToolEnv(pool=pool, sandbox=sandbox, max_turns=4, code_time_s=1.0)
    env.reset(options={"task": TASK})
    obs, *_, info = await env.astep(code("import sys\nprint('partial')\nraise ValueError('boom')"))
    assert info["tool_verdict"] == "RE"
    assert "partial" in obs[0]["content"] and "ValueError: boom" in obs[0]["content"]
    obs, *_, info = await env.astep(code("def f(:\n    pass"))
    assert info["tool_verdict"] == "CE" and "SyntaxError" in obs[0]["content"]
    obs, *_, info = await env.astep(code("while True:\n    pass"))
    assert info["tool_verdict"] == "TLE" and "time limit" in obs[0]["content"]


async def test_long_output_is_truncated(pool, sandbox):
    env = MathToolEnv(pool=pool, sandbox=sandbox, max_output_chars=300)
    env.reset(options={"task": TASK})
    obs, *_ = await env.astep(code("print('x' * 100000)"))
    assert len(obs[0]["content"]) < 500 and "more characters cut" in obs[0]["content"]


async def test_turn_limit_truncates(pool, sandbox):
    env = MathToolEnv(pool=pool, sandbox=sandbox, max_turns=2)
    env.reset(options={"task": TASK})
    assert (await env.astep(code("print(1)")))[2] is False
    _, reward, terminated, truncated, info = await env.astep(code("print(2)"))
    assert (reward, terminated, truncated, info["reason"]) == (0.0, False, True, "turn_limit")


@pytest.mark.parametrize(
    "text",
    ["", "no code and no answer", "\udc80\ud800", "a" * (1 << 20), "```python\n" + "x" * (1 << 20)],
    ids=["empty", "prose", "surrogates", "1MB", "1MB-unclosed-block"],
)
async def test_malformed_output_ends_with_zero(pool, sandbox, text):
    env = MathToolEnv(pool=pool, sandbox=sandbox)
    env.reset(options={"task": TASK})
    _, reward, terminated, truncated, info = await env.astep(text)
    assert (reward, terminated, truncated, info["reason"]) == (0.0, True, False, "no_answer")


async def test_sandbox_system_error_is_an_infra_error(pool):
    from sandbox import RunResult, TestResult, Verdict

    class DeadSandbox:  # stands in for a sandbox whose container died mid-run
        async def run(self, program, tests, limits=None, judge=None, *, early_stop=False):
            failed = TestResult(Verdict.SE, 0.0, 0.0, "", "", None, "container vanished")
            return RunResult(Verdict.SE, (failed,), backend="dead")

    env = MathToolEnv(pool=pool, sandbox=DeadSandbox())
    env.reset(options={"task": TASK})
    with pytest.raises(InfraError, match="container vanished"):
        await env.astep(code("print(1)"))


def test_sync_step_with_its_own_sandbox(pool):
    try:
        from sandbox import Sandbox, SandboxUnavailable

        Sandbox.create("auto")
    except (ImportError, SandboxUnavailable) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"MathTool-v0 needs a working sandbox in CI: {exc}")
        pytest.skip(f"no sandbox here: {exc}")
    env = MathToolEnv(pool=pool)  # creates and owns a sandbox per sync step
    env.reset(options={"task": TASK})
    obs, reward, *_ = env.step(code("print(6 * 7)"))
    assert "42" in obs[0]["content"] and reward == 0.0
    assert env.step("\\boxed{5080526250063507}")[1] == 1.0
    env.close()


async def test_a_container_killed_mid_run_is_an_infra_error(pool, sandbox):
    """The real failure: the docker container running the tool call disappears under it."""
    import asyncio
    import subprocess

    if sandbox.backend_name != "docker":
        pytest.skip(f"kills a docker container; this sandbox uses {sandbox.backend_name}")
    env = MathToolEnv(pool=pool, sandbox=sandbox, code_time_s=20.0)
    env.reset(options={"task": TASK})
    step = asyncio.create_task(env.astep(code("import time\ntime.sleep(15)")))
    live = sandbox._backend._live  # the sandbox's own containers only, never anyone else's
    removed = 0
    while not step.done():  # every container the call gets, its retries' included
        if live:
            await asyncio.sleep(1.0)  # the runner is inside the container by now
            ids = list(live)
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
            removed += 1
        await asyncio.sleep(0.05)
    assert removed, "the docker backend started no container"
    with pytest.raises(InfraError, match="system error"):
        await step
