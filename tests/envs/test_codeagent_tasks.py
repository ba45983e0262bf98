"""CodeAgent-v0's task data: enough distinct tasks, each a real bug whose fix passes the hidden
cases the buggy code fails; nothing of the hidden cases reaches the repository or the issue."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envs.codeagent.env import CodeAgentEnv, reference_calls
from envs.codeagent.grader import hidden_check
from envs.codeagent.tasks import SPECS, build_tasks, fixed_source
from envs.tools import parse_hermes

TASKS = build_tasks()


def test_there_are_at_least_30_distinct_tasks_in_both_splits():
    assert len(SPECS) >= 30 and len({s[0] for s in SPECS}) == len(SPECS)
    assert len({t["id"] for t in TASKS}) == len(TASKS)
    assert {t["split"] for t in TASKS} == {"train", "test"}
    env = CodeAgentEnv(tiers=["easy"])
    assert env.load_tasks("train") and all(t["tier"] == "easy" for t in env.load_tasks("test"))
    with pytest.raises(ValueError, match="tiers"):
        CodeAgentEnv(tiers=["medium"])


def _evaluate(tmp_path, task, source: str) -> tuple[list[bool], int]:
    """Run the task's visible test script and its hidden calls against `source` (a subprocess)."""
    repo = tmp_path / task["id"]
    for path, text in task["files"].items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    (repo / task["reference"]["path"]).write_text(source)
    visible = subprocess.run(
        [sys.executable, *task["test_command"].split()[1:]], cwd=repo, capture_output=True
    ).returncode
    # each hidden case's grader check code, with the function bound as the harness binds it
    checks = [hidden_check(c) for c in task["hidden"]]
    code = (
        f"import json, sys; sys.path.insert(0, {str(repo)!r}); import {task['module']} as m\n"
        "out = []\n"
        f"for c in {checks!r}:\n"
        "    try:\n"
        f"        exec(c, {{{task['function']!r}: m.{task['function']}}}); out.append(True)\n"
        "    except Exception:\n        out.append(False)\n"
        "print(json.dumps(out))"
    )
    passed = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    )
    return passed, visible


@pytest.mark.parametrize("task", [t for t in TASKS if t["tier"] == "easy"], ids=lambda t: t["spec"])
def test_the_bug_fails_every_hidden_case_and_the_fix_passes_them(tmp_path, task):
    buggy = task["files"][task["reference"]["path"]]
    passed, visible_exit = _evaluate(tmp_path, task, buggy)
    assert not any(passed) and visible_exit == 1
    passed, visible_exit = _evaluate(tmp_path, task, fixed_source(task))
    assert all(passed) and visible_exit == 0


def test_hidden_cases_appear_nowhere_the_agent_can_see():
    for task in TASKS:
        seen = task["issue"] + "".join(task["files"].values())
        for case in task["hidden"]:
            assert case["call"] not in seen, (task["id"], case["call"])


def test_reference_calls_parse_into_the_fix_and_submit():
    task = TASKS[0]
    calls = parse_hermes(reference_calls(task)).calls
    assert [c.name for c in calls] == ["str_replace", "submit"]
    assert calls[0].arguments == task["reference"]
    # the CPU config offers only these two tools: nothing to look at or run, so one turn as is
    env = CodeAgentEnv(tools=["str_replace", "submit"], max_turns=3)
    assert env.reference_response(task) == reference_calls(task)


def test_multi_turn_references_fit_the_tools_and_turns_offered():
    task = TASKS[0]

    def names(turns):
        return [[c.name for c in parse_hermes(t).calls] for t in turns]

    full = CodeAgentEnv(max_turns=6).reference_response(task)
    assert names(full) == [["read_file"], ["run_tests"], ["str_replace"], ["run_tests"], ["submit"]]
    three = CodeAgentEnv(max_turns=3).reference_response(task)
    assert names(three) == [["read_file"], ["str_replace"], ["submit"]]
    bash_only = CodeAgentEnv(tools=["bash", "str_replace", "submit"], max_turns=4)
    assert names(bash_only.reference_response(task)) == [
        ["bash"],
        ["str_replace"],
        ["bash"],
        ["submit"],
    ]
