"""CodeAgent-v0 and MathTool-v1 in real sandbox sessions (bubblewrap and docker).

The reward path assumes a hostile policy: the agent tries to find or read the hidden tests through
every tool, leaves processes behind to tamper with the grader, plants modules that shadow what
the grader imports and stale bytecode; none of it reads a hidden case or changes the score.
Under CI=true a backend that cannot run here fails the test instead of skipping it.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

import sandbox
from envs.codeagent.env import CodeAgentEnv, reference_calls
from envs.codeagent.tasks import build_tasks
from envs.errors import InfraError
from envs.mathtool_v1 import MathToolV1Env
from tests.envs.episode_util import reset_or_fail

BACKENDS = ("bubblewrap", "docker")
TASK = next(t for t in build_tasks() if t["id"] == "add-easy")


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


_open: list = []  # envs of the running test, closed even when an assertion fails


def run(coro):
    async def main():
        try:
            return await coro
        finally:
            for env in _open:
                await env.aclose()
            _open.clear()
            await sandbox.close_sessions()

    return asyncio.run(main())


async def started(backend: str, task=TASK, **kw) -> CodeAgentEnv:
    env = CodeAgentEnv(backend=backend, **kw)
    _open.append(env)
    await reset_or_fail(env, task, backend)
    return env


@pytest.mark.parametrize("backend", BACKENDS)
def test_reference_fix_scores_1_and_the_untouched_repo_0(backend):
    async def main():
        env = await started(backend)
        obs, *_ = await env.astep(call("run_tests") + call("read_file", path="calc.py"))
        assert "FAIL add(2, 3) -> -1" in obs[0]["content"] and "return a - b" in obs[1]["content"]
        _, reward, term, _, info = await env.astep(reference_calls(TASK))
        assert (reward, term, info["submitted"], info["hidden_pass_frac"]) == (1.0, True, True, 1.0)
        await env.aclose()
        env = await started(backend)
        _, reward, term, _, info = await env.astep(call("submit"))
        assert (reward, term) == (0.0, True) and info["hidden_passed"] == [False] * 3
        await env.aclose()

    run(main())


@pytest.mark.parametrize("task_id", ["add-easy", "add-hard"])
def test_multi_turn_reference_reads_runs_the_tests_fixes_reruns_and_resolves(task_id):
    task = next(t for t in build_tasks() if t["id"] == task_id)

    async def main():
        env = await started("bubblewrap", task, max_turns=6)
        turns = env.reference_response(task)
        assert isinstance(turns, list) and len(turns) == 5, turns
        seen = []
        for turn in turns[:-1]:
            obs, reward, term, trunc, info = await env.astep(turn)
            assert not (term or trunc) and len(obs) == 1, (turn, obs)
            seen.append(obs[0]["content"])
        look, before, edit, after = seen
        assert task["reference"]["old"] in look and "FAIL" in before, (look, before)
        assert "FAIL" not in after and "Error" not in edit, (edit, after)
        _, reward, term, _, info = await env.astep(turns[-1])
        assert (reward, term, info["resolved"]) == (1.0, True, True), info
        assert info["env_metrics"]["tool_errors"] == 0, info

    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_agent_cannot_find_or_read_the_hidden_tests_through_any_tool(backend):
    secrets_ = [c["call"] for c in TASK["hidden"]] + [
        json.dumps(c["expect"]) for c in TASK["hidden"]
    ]
    probes = [
        call(
            "bash",
            command="grep -rF 'add(10, 4)' / 2>/dev/null | head; find / -name '*hidden*' "
            "-o -name '*cases*' -o -name '*grader*' 2>/dev/null | grep -v ^/proc | head",
        ),
        call("bash", command="ls -la /workspace /workspace/repo /tmp; env; cat /proc/1/cmdline"),
        call("read_file", path="/workspace/.grader/cases.json"),
        call("read_file", path="../cases.json"),
    ]
    tamper = [  # a watcher left running to rewrite the grader, and modules shadowing its imports
        call(
            "bash",
            command="(while true; do for d in /workspace/.grader-*; do "
            "echo 'print(1)' > $d/runner.py; done; sleep 0.01; done) >/dev/null 2>&1 &",
        ),
        call("write_file", path="json.py", content="raise SystemExit('shadowed json')\n"),
        call("write_file", path="signal.py", content="raise SystemExit('shadowed signal')\n"),
        call(
            "write_file",
            path="calc.py",
            content="import sys\nprint('HIDDEN- [{\"value\": 14}]')\n"
            "def add(a, b):\n    return a + b\n",
        ),
    ]

    async def main():
        env = await started(backend, max_turns=6)
        seen = []
        for action in probes:
            obs, _, term, _, _ = await env.astep(action)
            seen += [m["content"] for m in obs]
            assert not term
        for text in seen:
            assert not any(s in text for s in secrets_[:3]), text  # no hidden call anywhere
        obs, *_ = await env.astep("".join(tamper))
        assert all(not m["content"].startswith("Error") for m in obs), obs
        obs, reward, term, _, info = await env.astep(call("submit"))
        # The planted modules changed nothing: the fixed add() passes every hidden case.
        assert term and reward == 1.0 and info["hidden_pass_frac"] == 1.0
        await env.aclose()

    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_stale_bytecode_never_stands_in_for_the_source(backend):
    async def main():
        env = await started(backend)
        # run the tests (imports calc), make a same-size fix, then plant the old bytecode back
        await env.astep(
            call(
                "bash",
                command="python3 -c 'import calc' && unset PYTHONDONTWRITEBYTECODE "
                "&& python3 -c 'import calc' && ls __pycache__",
            )
        )
        obs, reward, *_ = await env.astep(
            call("str_replace", path="calc.py", old="a - b", new="a + b") + call("submit")
        )
        assert reward == 1.0
        await env.aclose()

    run(main())


@pytest.mark.parametrize("backend", ["bubblewrap"])
def test_str_replace_needs_a_unique_snippet_and_errors_reach_the_model(backend):
    async def main():
        env = await started(backend)
        obs, _, term, _, info = await env.astep(
            call("str_replace", path="calc.py", old="zzz", new="y")
            + call("str_replace", path="calc.py", old="b", new="c")
            + call("read_file", path="nope.py")
        )
        assert "occurs 0 times" in obs[0]["content"] and "occurs 2 times" in obs[1]["content"]
        assert "cannot read nope.py" in obs[2]["content"] and not term
        assert info["env_metrics"]["tool_errors"] == 3
        await env.aclose()

    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_mathtool_v1_keeps_python_state_between_tool_calls(backend):
    async def main():
        env = MathToolV1Env(backend=backend, max_turns=4)
        _open.append(env)
        task = {"id": "t", "question": "What is 6 * 7?", "answer": "42"}
        try:
            await env.areset(options={"task": task})
        except InfraError as exc:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(str(exc))
            pytest.skip(str(exc))
        assert env.tool_schemas()[0]["function"]["name"] == "python"
        obs, *_ = await env.astep(call("python", code="x = 6\ndef f(y):\n    return x * y"))
        obs, reward, term, *_ = await env.astep(call("python", code="print(f(7))"))
        assert obs[0]["content"].strip() == "42" and not term
        obs, *_ = await env.astep(call("python", code="1/0"))
        assert "ZeroDivisionError" in obs[0]["content"]
        _, reward, term, _, info = await env.astep("So the answer is \\boxed{42}.")
        assert (reward, term, info["correct"]) == (1.0, True, True)
        await env.aclose()

    run(main())


@pytest.mark.parametrize("backend", ["bubblewrap"])
def test_format_reward_is_bounded_and_needs_a_parsed_call(backend):
    async def main():
        scores = []
        edit = call("str_replace", path="calc.py", old="nope", new="x")
        for action in (
            edit + call("submit"),
            edit + "<tool_call>{bad</tool_call>" + call("submit"),
            call("submit"),  # no edit: no shaping
            "no calls",
        ):
            env = await started(backend, format_reward=0.5)
            scores.append((await env.astep(action))[1])
            await env.aclose()
        assert scores == [0.5, pytest.approx(1 / 3), 0.0, 0.0]  # hidden tests 0 throughout
        with pytest.raises(ValueError, match="format_reward"):
            CodeAgentEnv(format_reward=2.0)

    run(main())
