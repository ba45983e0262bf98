"""A dataset and reward functions as TRL's GRPOTrainer takes them (envs/reward_functions.py),
trained through `gspo_agents.Trainer(dataset=..., reward_funcs=...)`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from doc_recipes import metrics_rows, readme_python_block, run_python_example

from envs.reward_functions import RewardFunctionEnv, load_rows

sys.path.insert(0, str(Path(__file__).resolve().parent / "sandbox"))
from sbtest_util import make_sandbox  # noqa: E402

ROWS = [{"prompt": f"Say {w}.", "answer": w} for w in ("hi", "yes", "ok", "go")]


def contains_answer(prompts, completions, answer, **_):
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer, strict=True)]


def play(env: RewardFunctionEnv, row: dict, text: str):
    env.reset(options={"task": row})
    return asyncio.run(env.astep(text))


def test_functions_get_the_rows_columns_and_their_weighted_sum_is_the_reward():
    seen = {}

    def spy(prompts, completions, completion_ids, answer, extra, **_):
        seen.update(prompts=prompts, completions=completions, answer=answer, extra=extra)
        return [None]  # not applicable: counts 0, as in TRL

    async def length(completions, **_):
        return [len(completions[0]) / 10]

    rows = [{**ROWS[0], "extra": 7}]
    env = RewardFunctionEnv(rows, [contains_answer, spy, length], reward_weights=[2.0, 5.0, 1.0])
    _, reward, done, truncated, info = play(env, env.load_tasks("train")[0], "hi there")
    assert (done, truncated) == (True, False)
    assert reward == pytest.approx(2.0 * 1.0 + 0.0 + 0.8)
    assert seen == {
        "prompts": ["Say hi."],
        "completions": ["hi there"],
        "answer": ["hi"],
        "extra": [7],
    }
    assert info["env_metrics"]["reward_contains_answer"] == 1.0


def test_conversational_prompts_give_conversational_completions():
    row = {
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    }

    def first_word(completions, **_):
        return [float(completions[0][0]["content"].startswith("Hello"))]

    env = RewardFunctionEnv([row], [first_word])
    messages, _ = env.reset(options={"task": env.load_tasks("train")[0]})
    assert messages == row["prompt"]
    assert asyncio.run(env.astep("Hello!"))[1] == 1.0


def test_bad_rows_functions_and_returns_are_named(tmp_path):
    with pytest.raises(ValueError, match="row 1: needs a 'prompt'"):
        load_rows([{"prompt": "a"}, {"question": "b"}])
    with pytest.raises(ValueError, match="no such file"):
        load_rows(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="package.module:function"):
        RewardFunctionEnv(ROWS, ["contains_answer"])
    with pytest.raises(ValueError, match="2 values for 1 functions"):
        RewardFunctionEnv(ROWS, [contains_answer], reward_weights=[1, 2])
    env = RewardFunctionEnv(ROWS, [lambda completions, **_: 1.0])
    with pytest.raises(TypeError, match="must return a list with one value"):
        play(env, env.load_tasks("train")[0], "x")
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    by_name = RewardFunctionEnv(str(path), ["test_reward_functions:contains_answer"])
    assert play(by_name, by_name.load_tasks("train")[1], "yes")[1] == 1.0


async def test_a_function_that_takes_the_sandbox_runs_the_completion_in_it():
    from sandbox import Program, TestCase

    async def runs(completions, sandbox, **_):
        result = await sandbox.run(Program("python", completions[0]), [TestCase("", "3")])
        return [float(result.passed == 1)]

    sandbox = make_sandbox("bubblewrap")
    try:
        env = RewardFunctionEnv(ROWS, [runs], sandbox=sandbox)
        env.reset(options={"task": ROWS[0]})
        assert (await env.astep("print(1 + 2)"))[1] == 1.0
        env.reset(options={"task": ROWS[0]})
        assert (await env.astep("import os; print(os.listdir('/root'))"))[1] == 0.0
    finally:
        await sandbox.aclose()
    with pytest.raises(ValueError, match="takes a sandbox but none was given"):
        RewardFunctionEnv(ROWS, [runs])


def readme_reward_example() -> str:
    return readme_python_block("reward_funcs=")


@pytest.mark.slow  # a real (tiny) training, about a minute
def test_the_readmes_reward_function_example_trains_as_written(tmp_path):
    proc = run_python_example(readme_reward_example(), tmp_path, timeout_s=1800)
    assert "'final_step': 4" in proc.stdout
    rows = metrics_rows(tmp_path / "runs/reward-fns")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert sum(r["num_signal_seqs"] for r in rows) > 0  # groups with reward spread moved it
    assert all(0 <= r["rollout/reward_mean"] <= 1.5 for r in rows)  # the weighted sum
    assert any(r["rollout/reward_mean"] > 0 for r in rows)
