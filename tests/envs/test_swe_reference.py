"""SWE-v0's multi-turn cold-start references: stepped through the env in a real bubblewrap session,
they look around, see the failure, fix it, see the tests pass, and resolve the instance. Under
CI=true a missing bubblewrap fails the test instead of skipping it."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

import sandbox
from envs.swe.env import DEFAULT_SOURCE, SWEEnv, task_row
from envs.swe.instances import load_instances
from envs.swe.reference import hunk_starts
from tests.envs.episode_util import reset_or_fail

INSTANCES = {i.instance_id: i for i in load_instances(DEFAULT_SOURCE.removeprefix("swe:"))}
STEPPED = ("toolz__toolz-1.2.0.drop_branch__96", "parse__parse-1.22.4.flip_binop__102")


def _names(turn: str) -> list[str]:
    blocks = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", turn, re.S)
    return [json.loads(b)["name"] for b in blocks]


async def _play(env: SWEEnv, task: dict) -> tuple[list[str], list[list[dict]], float, dict]:
    turns = env.reference_response(task)
    assert turns is not None
    observations = []
    try:
        await reset_or_fail(env, task, "bubblewrap")
        for k, turn in enumerate(turns):
            obs, reward, term, trunc, info = await env.astep(turn)
            observations.append(obs)
            if term or trunc:
                assert k == len(turns) - 1, f"the episode ended at turn {k} of {len(turns)}"
                return turns, observations, reward, info
        raise AssertionError("the reference never ended the episode")
    finally:
        await env.aclose()
        await sandbox.close_sessions()


@pytest.mark.parametrize("iid", STEPPED)
def test_reference_turns_explore_reproduce_fix_test_and_resolve(iid):
    env = SWEEnv(backend="bubblewrap", exec_timeout_s=120.0, max_turns=8)
    turns, obs, reward, info = asyncio.run(_play(env, task_row(INSTANCES[iid])))
    names = [_names(t) for t in turns]
    assert names[0] == ["bash", "view"] and names[1] == ["bash"], names  # grep + view, the tests
    assert names[2] == ["str_replace"] and names[3] == ["bash"] and names[4] == ["submit"], names
    look, before, edit, after = (m[-1]["content"] for m in obs[:4])
    path, line = hunk_starts(INSTANCES[iid].gold_patch)[0]
    assert f"{line + 3:6}\t" in look, look  # the view shows the buggy line, numbered
    assert re.search(r"\b1 failed\b", before), before  # -x: stops at the first failure
    assert f"Edited {path}" in edit, edit
    assert re.search(r"\d+ passed", after) and "failed" not in after, after
    assert reward == 1.0 and info["resolved"], info
    assert info["env_metrics"]["tool_errors"] == 0, info
    metrics = info["env_metrics"]  # what metrics.jsonl averages per step (rollout/env/...)
    assert metrics["resolved"] == metrics["tests_pass_frac"] == metrics["submitted"] == 1.0


def test_references_fit_the_tools_and_turns_offered():
    task = task_row(INSTANCES[STEPPED[0]])
    short = SWEEnv(max_turns=3, tools=["view", "str_replace", "submit"]).reference_response(task)
    assert short is not None and [_names(t) for t in short] == [
        ["view"],
        ["str_replace"],
        ["submit"],
    ]
    two = SWEEnv(max_turns=2).reference_response(task)
    assert two is not None and [_names(t) for t in two] == [["str_replace"], ["submit"]]
    assert SWEEnv(tools=["bash", "view", "submit"]).reference_response(task) is None
