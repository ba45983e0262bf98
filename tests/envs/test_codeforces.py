"""Codeforces-v0 without a sandbox: answer extraction, the shipped problem set, loaders, prompts,
and the verdicts of answers that never reach the judge."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from envs.codeforces.env import CodeforcesEnv, judge_spec, render_prompt
from envs.codeforces.extract import (
    INVALID_UTF8,
    MAX_SOURCE_BYTES,
    NO_CODE,
    SOURCE_TOO_LONG,
    UNKNOWN_LANGUAGE,
    extract_code,
)
from envs.codeforces.openr1 import load_openr1, row_to_problem, wrap_generated_checker
from envs.codeforces.problems import SHIPPED_DIR, Problem, load_problemset, load_split
from envs.errors import TaskError

PROBLEMS = load_problemset()


# -- extraction -------------------------------------------------------------------------------
def test_last_code_block_wins_and_language_comes_from_the_fence():
    answer = "First try:\n```cpp\nint main(){}\n```\nBetter:\n```Python3\nprint(1)\n```\nDone."
    got = extract_code(answer)
    assert got.ok and got.language == "python" and got.source == "print(1)\n"


@pytest.mark.parametrize(
    "tag,language",
    [
        ("py", "python"),
        ("python", "python"),
        ("c++", "cpp"),
        ("cc", "cpp"),
        ("cpp", "cpp"),
        ("cpp title=x", "cpp"),
    ],
)
def test_language_aliases(tag, language):
    assert extract_code(f"```{tag}\nx\n```").language == language


def test_unclosed_final_block_is_still_the_submission():
    got = extract_code("Here:\n```python\nprint(2)")
    assert got.ok and got.source == "print(2)\n"


@pytest.mark.parametrize(
    "answer,verdict",
    [
        ("", NO_CODE),
        ("   \n\t", NO_CODE),
        ("print(1)", NO_CODE),
        ("```\nprint(1)\n```", UNKNOWN_LANGUAGE),
        ("```java\nclass A {}\n```", UNKNOWN_LANGUAGE),
        ("```python\n\n```", NO_CODE),
        (b"```python\nprint('\xff')\n```", INVALID_UTF8),
        ("```python\nprint('\udcff')\n```", INVALID_UTF8),
        ("```python\n" + "x = 1\n" * (MAX_SOURCE_BYTES // 6 + 1) + "```", SOURCE_TOO_LONG),
    ],
)
def test_unjudgeable_answers_get_a_verdict_not_an_exception(answer, verdict):
    got = extract_code(answer)
    assert not got.ok and got.verdict == verdict and got.message


def test_a_one_megabyte_answer_is_handled():
    prose = ("word " * 200 + "\n") * 1100  # ~1.1 MB without a fence
    assert len(prose) > 1 << 20
    assert extract_code(prose).verdict == NO_CODE
    fenced = "```python\n" + prose + "```"
    assert extract_code(fenced).verdict == SOURCE_TOO_LONG


# -- the shipped problem set ------------------------------------------------------------------
def test_problem_set_size_and_shape():
    assert len(PROBLEMS) >= 50
    assert len({p.id for p in PROBLEMS}) == len(PROBLEMS)
    assert sum(p.tier == "easy" for p in PROBLEMS) >= 15
    for p in PROBLEMS:
        assert p.samples, p.id
        assert len(p.tests) >= 10, p.id
        assert set(p.reference) == {"python", "cpp"}, p.id
        assert p.time_limit_s > 0 and p.memory_mb > 0
        assert {t.input for t in p.samples}.isdisjoint({t.input for t in p.tests}), p.id


def test_problem_set_has_checker_and_float_problems():
    modes = [p.judge.mode for p in PROBLEMS]
    assert modes.count("checker") >= 3 and modes.count("float") >= 3
    for p in PROBLEMS:
        spec = judge_spec(p)
        if p.judge.mode == "checker":
            assert spec.checker is not None and "sys.argv" in spec.checker.source


def test_several_problems_have_generated_tests_recorded_with_their_seed():
    generated = 0
    for d in sorted(SHIPPED_DIR.iterdir()):
        if (d / "problem.json").is_file():
            origin = json.loads((d / "problem.json").read_text())["tests_origin"]
            generated += origin["n_generated"] > 0 and isinstance(origin["generator_seed"], int)
    assert generated >= 10


def test_splits_are_disjoint_committed_and_cover_every_problem():
    train, test = load_split("train"), load_split("test")
    train_ids, test_ids = {p.id for p in train}, {p.id for p in test}
    assert train_ids.isdisjoint(test_ids)
    assert train_ids | test_ids == {p.id for p in PROBLEMS}
    assert any(p.tier == "easy" for p in test) and any(p.tier == "medium" for p in test)
    assert [p.id for p in load_split("test")] == [p.id for p in test]  # deterministic


def test_rows_round_trip_and_are_json():
    for p in PROBLEMS:
        row = json.loads(json.dumps(p.to_row()))
        assert Problem.from_row(row) == p


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda r: r.pop("tests"), "'tests'"),
        (lambda r: r.update(time_limit_s=-1), "time_limit_s"),
        (lambda r: r.update(judge={"mode": "fuzzy"}), "judge.mode"),
        (lambda r: r.update(judge={"mode": "checker"}), "checker"),
        (lambda r: r["tests"].append({"input": "1"}), "tests[10]"),
    ],
)
def test_malformed_rows_name_the_field(mutate, needle):
    row = next(p for p in PROBLEMS if p.id == "a_plus_b").to_row()
    row["tests"] = row["tests"][:10]
    mutate(row)
    with pytest.raises(TaskError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        Problem.from_row(row)


def test_prompt_has_statement_samples_limits_and_instruction():
    p = next(p for p in PROBLEMS if p.id == "a_plus_b")
    prompt = render_prompt(p)
    assert "print their sum" in prompt and "Example 2" in prompt and "-5 3" in prompt
    assert "Time limit: 2 s" in prompt and "256 MB" in prompt and "```python" in prompt
    assert max(len(render_prompt(p)) for p in PROBLEMS if p.tier == "easy") < 900


def test_reference_response_is_a_short_python_block():
    env = CodeforcesEnv()
    for row in env.load_tasks("train"):
        answer = env.reference_response(row)
        got = extract_code(answer)
        assert got.ok and got.language == "python" and answer.startswith("```python\n")
    easy = [env.reference_response(r) for r in env.load_tasks("train") if r["tier"] == "easy"]
    assert max(len(a) for a in easy) < 200


# -- the env on answers that never reach the judge ----------------------------------------------
@pytest.mark.parametrize(
    "answer,verdict",
    [
        ("", NO_CODE),
        ("I think the answer is 3.", NO_CODE),
        ("x" * (1 << 20), NO_CODE),
        ("```python\n" + "#" * (1 << 20) + "\n```", SOURCE_TOO_LONG),
        (b"\xff\xfe```python\nprint(1)\n```", INVALID_UTF8),
        ("```rust\nfn main() {}\n```", UNKNOWN_LANGUAGE),
    ],
)
def test_env_scores_unjudgeable_answers_zero_with_a_verdict(answer, verdict):
    env = CodeforcesEnv()
    row = next(p for p in PROBLEMS if p.id == "a_plus_b").to_row()
    env.reset(options={"task": row})
    obs, reward, terminated, truncated, info = env.step(answer)
    assert (obs, reward, terminated, truncated) == ([], 0.0, True, False)
    assert info["verdict"] == verdict and info["message"] and info["turn_reward"] == 0.0
    assert env._sandbox is None  # nothing was sent to (or started) a sandbox
    env.close()


def test_multi_turn_unjudgeable_answer_gets_a_retry_message():
    env = CodeforcesEnv(max_turns=2)
    env.reset(options={"task": PROBLEMS[0].to_row()})
    obs, reward, terminated, _, info = env.step("no code here")
    assert not terminated and reward == 0.0 and obs[0]["role"] == "user"
    assert "```python" in obs[0]["content"] and info["turn"] == 1
    env.close()


async def test_sync_step_inside_a_running_loop_says_to_use_astep():
    env = CodeforcesEnv()
    env.reset(options={"task": PROBLEMS[0].to_row()})
    with pytest.raises(RuntimeError, match="astep"):
        env.step("```python\nprint(1)\n```")
    assert (await env.astep(""))[4]["verdict"] == NO_CODE
    await env.aclose()


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="reward_mode"):
        CodeforcesEnv(reward_mode="partial")
    with pytest.raises(ValueError, match="split"):
        CodeforcesEnv().load_tasks("validation")


# -- user directories and the open-r1 schema ----------------------------------------------------
def test_user_problem_directory_without_splits_loads_every_problem(tmp_path: Path):
    import shutil

    for pid in ("a_plus_b", "derangement"):
        shutil.copytree(SHIPPED_DIR / pid, tmp_path / pid)
    rows = CodeforcesEnv(problems_dir=str(tmp_path)).load_tasks("train")
    assert sorted(r["id"] for r in rows) == ["a_plus_b", "derangement"]
    (tmp_path / "derangement" / "checker.py").unlink()
    with pytest.raises(TaskError, match="checker.py is missing"):
        load_problemset(tmp_path)


def _openr1_row(pid: str, **over) -> dict:
    row = {
        "id": pid,
        "title": "Sum",
        "description": "Print a+b.",
        "input_format": "Two integers.",
        "output_format": "Their sum.",
        "interaction_format": None,
        "note": None,
        "examples": [{"input": "1 2\n", "output": "3\n"}],
        "official_tests": [
            {"input": "1 2\n", "output": "3\n"},
            {"input": "5 5\n", "output": "10\n"},
        ],
        "official_tests_complete": True,
        "time_limit": 1.5,
        "memory_limit": 128.0,
        "input_mode": "stdio",
        "generated_checker": None,
        "rating": 800,
        "tags": ["math"],
    }
    row.update(over)
    return row


def test_openr1_row_maps_statement_tests_limits():
    p = row_to_problem(_openr1_row("1A"))
    assert (
        p.title == "Sum" and "Print a+b." in p.statement and "Input\nTwo integers." in p.statement
    )
    assert [t.input for t in p.samples] == ["1 2\n"] and [t.input for t in p.tests] == ["5 5\n"]
    assert p.time_limit_s == 1.5 and p.memory_mb == 128 and p.judge.mode == "tokens"


@pytest.mark.parametrize(
    "over,needle",
    [
        ({"interaction_format": "Interact with the jury."}, "interactive"),
        ({"input_mode": "file"}, "input_mode='file'"),
        ({"official_tests": []}, "no official_tests"),
    ],
)
def test_openr1_unsupported_rows_error_clearly(over, needle):
    with pytest.raises(TaskError, match=needle):
        row_to_problem(_openr1_row("2B", **over))


def test_openr1_parquet_with_splits_skip_and_checker(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [_openr1_row(f"{i}A") for i in range(40)]
    rows.append(_openr1_row("99Z", interaction_format="Interactive."))
    rows.append(_openr1_row("98Y", generated_checker="import sys\nprint(1)\n"))
    path = tmp_path / "cf.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(TaskError, match="99Z"):
        load_openr1(path)
    every = load_openr1(path, skip_unsupported=True)
    assert len(every) == 41
    train = load_openr1(path, "train", skip_unsupported=True)
    test = load_openr1(path, "test", skip_unsupported=True)
    assert {p.id for p in train}.isdisjoint({p.id for p in test}) and len(train) + len(test) == 41
    checked = next(p for p in every if p.id == "98Y")
    assert checked.judge.mode == "checker" and "open-r1 order" in checked.judge.checker_source
    env = CodeforcesEnv(openr1_path=str(path), openr1_skip_unsupported=True)
    assert len(env.load_tasks("train")) == len(train)


def test_openr1_split_placeholder_and_jsonl(tmp_path: Path):
    for split, n in (("train", 3), ("test", 2)):
        lines = [json.dumps(_openr1_row(f"{split}{i}")) for i in range(n)]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    assert len(load_openr1(tmp_path / "{split}.jsonl", "test")) == 2
    assert len(load_openr1(tmp_path / "{split}.jsonl", "train")) == 3


def test_generated_checker_wrapper_follows_both_contracts(tmp_path: Path):
    import subprocess
    import sys

    # An open-r1 style checker: argv = input, correct output, solution output; prints 1 or 0.
    checker = (
        "import sys\ninp, cor, sol = sys.argv[1:4]\n"
        "print(1 if open(cor).read().split() == open(sol).read().split() else 0)\n"
    )
    prog = tmp_path / "wrapped.py"
    prog.write_text(wrap_generated_checker(checker))
    (tmp_path / "in").write_text("1 2\n")
    (tmp_path / "ans").write_text("3\n")
    for output, code in (("3\n", 0), ("4\n", 1)):
        (tmp_path / "out").write_text(output)
        argv = [
            sys.executable,
            str(prog),
            str(tmp_path / "in"),
            str(tmp_path / "out"),
            str(tmp_path / "ans"),
        ]
        assert subprocess.run(argv, capture_output=True).returncode == code


def test_astep_is_a_coroutine_function():
    assert asyncio.iscoroutinefunction(CodeforcesEnv.astep)


def test_registered_as_gspo_codeforces_v0():
    import gymnasium as gym

    import envs

    env = envs.make("codeforces", max_turns=2, reward_mode="fraction")
    assert isinstance(env, CodeforcesEnv) and env.max_turns == 2 and env.reward_mode == "fraction"
    assert isinstance(gym.make("gspo/Codeforces-v0").unwrapped, CodeforcesEnv)
