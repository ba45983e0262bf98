"""Rows as a person would read them: GeeksforGeeks TACO rows become function tests (or are
refused with the reason), statements' comparison rules apply, function examples read as calls,
open-r1 options and gzipped / JSON-array files. Judged for real in bubblewrap."""

from __future__ import annotations

import gzip
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))
from sbtest_util import make_sandbox  # noqa: E402

from envs.codeforces.env import CodeforcesEnv, render_prompt  # noqa: E402
from envs.codeforces.loaders import load_source  # noqa: E402
from envs.codeforces.loaders.statement_rules import judge_from_statement  # noqa: E402
from envs.codeforces.problems import Problem  # noqa: E402
from envs.errors import TaskError  # noqa: E402
from sandbox import Sandbox  # noqa: E402

GFG_STARTER = "#User function Template for python3\n\nclass Solution:\n    def maxSum(self, arr, n, k):\n        # code here\n"


def gfg_row(name: str, **over: object) -> dict:
    row = {
        "question": "Given an array arr[] of size N, find the maximum sum of K consecutive elements.",
        "solutions": json.dumps([]),
        "starter_code": GFG_STARTER,
        "input_output": json.dumps(
            {
                "inputs": [
                    "N = 5\nK = 2\narr[] = {1, 2, 3, 4, 5}",
                    "N = 3\nK = 3\narr[] = {-1, 5, 2}",
                ],
                "outputs": ["9", "6"],
            }
        ),
        "difficulty": "EASY",
        "raw_tags": "[]",
        "name": name,
        "source": "geeksforgeeks",
        "tags": "[]",
        "skill_types": "[]",
        "url": "https://example.org/" + name,
        "Expected Auxiliary Space": "O(1)",
        "time_limit": None,
        "date": None,
        "picture_num": "0",
        "memory_limit": None,
        "Expected Time Complexity": "O(N)",
    }
    row.update(over)
    return row


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
async def sb() -> AsyncIterator[Sandbox]:
    sandbox = make_sandbox("bubblewrap")
    try:
        yield sandbox
    finally:
        await sandbox.aclose()


async def reward(sb: Sandbox, problem: Problem, source: str) -> float:
    env = CodeforcesEnv(sandbox=sb)
    env.reset(options={"task": problem.to_row()})
    _, value, _, _, info = await env.astep(f"```python\n{source}\n```")
    return value


MAX_SUM = (
    "class Solution:\n    def maxSum(self, arr, n, k):\n"
    "        return max(sum(arr[i:i + k]) for i in range(n - k + 1))\n"
)


async def test_gfg_rows_become_function_tests_and_judge_for_real(sb, tmp_path: Path):
    path = write_jsonl(tmp_path / "taco.jsonl", [gfg_row("maxsum")])
    [problem] = load_source(f"taco:{path}", "test", split_mode="all")
    assert problem.function_name == "Solution.maxSum"
    prompt = render_prompt(problem)
    assert "Solution().maxSum([1, 2, 3, 4, 5], 5, 2) == 9" in prompt
    assert "nonce" not in prompt
    assert await reward(sb, problem, MAX_SUM) == 1.0
    reading_stdin = "n = int(input())\nprint(9)"
    assert await reward(sb, problem, reading_stdin) == 0.0
    off_by_one = MAX_SUM.replace("n - k + 1", "n - k")
    assert await reward(sb, problem, off_by_one) == 0.0


def test_gfg_values_arrays_strings_and_lists(tmp_path: Path):
    starter = "class Solution:\n    def f(self, s, grid):\n        pass\n"
    io = {"inputs": ['S = "ab c"\ngrid[][] = {{1, 2}, {3, 4}}'], "outputs": ["1 2 3"]}
    row = gfg_row("shapes", starter_code=starter, input_output=json.dumps(io))
    [problem] = load_source(
        f"taco:{write_jsonl(tmp_path / 'r.jsonl', [row])}", "t", split_mode="all"
    )
    assert "Solution().f('ab c', [[1, 2], [3, 4]]) == [1, 2, 3]" in render_prompt(problem)


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"starter_code": "def maxSum(arr, n, k):\n    pass\n"}, "no `class Solution` method"),
        (
            {"starter_code": GFG_STARTER.replace("arr, n, k", "a, size, k")},
            "have no input variable of that name",
        ),
        (
            {"starter_code": "class Node:\n    pass\n\n" + GFG_STARTER},
            "linked list or tree",
        ),
        (
            {
                "input_output": json.dumps(
                    {"inputs": ["N = 2\nK = 1\narr[] = 1 -> 2"], "outputs": ["2"]}
                )
            },
            "cannot read the input value",
        ),
        (
            {"input_output": json.dumps({"inputs": ["5 2\n1 2 3 4 5"], "outputs": ["9"]})},
            "have no input variable of that name",
        ),  # source: geeksforgeeks, so never a stdin problem even in stdin's shape
    ],
)
def test_gfg_rows_that_cannot_be_converted_are_refused_and_counted(tmp_path, caplog, over, reason):
    rows = [gfg_row("good"), gfg_row("bad", **over)]
    path = write_jsonl(tmp_path / "taco.jsonl", rows)
    with pytest.raises(TaskError, match=reason):
        load_source(f"taco:{path}", "t", split_mode="all")
    with caplog.at_level(logging.WARNING):
        problems = load_source(f"taco:{path}", "t", split_mode="all", skip_unsupported=True)
    assert [p.title for p in problems] == ["good"]
    assert "skipped 1 rows" in caplog.text and reason in caplog.text


@pytest.mark.parametrize(
    ("statement", "judge"),
    [
        ("Print YES or NO. You can output the answer in any case (upper or lower).",
         {"mode": "tokens", "case_sensitive": False}),
        ("You may print each letter in any register.", {"mode": "tokens", "case_sensitive": False}),
        ("Print the distance. Your answer is considered correct if its absolute or relative "
         "error does not exceed $10^{-6}$.", {"mode": "float", "abs_tol": 1e-6, "rel_tol": 1e-6}),
        ("The relative error must not exceed 10^{-4}.",
         {"mode": "float", "abs_tol": 0.0, "rel_tol": 1e-4}),
        ("Print the answer.", {"mode": "tokens"}),
        ("The string has lowercase letters. In any event print it.", {"mode": "tokens"}),
        ("In any case, the answer fits in a 64-bit integer.", {"mode": "tokens"}),
        ("If there is a solution print YES, else NO. In any case, print a newline.",
         {"mode": "tokens"}),
        ('Print "Yes" or "No" (without quotes) in any letter case.',
         {"mode": "tokens", "case_sensitive": False}),
    ],
)  # fmt: skip
def test_statement_rules_become_judge_options(statement: str, judge: dict):
    assert judge_from_statement(statement) == judge


async def test_livecodebench_any_case_rule_is_applied_in_the_sandbox(sb, tmp_path: Path):
    row = {
        "question_id": "abc999_a",
        "question_title": "Yes",
        "question_content": "Print Yes. You can print each letter in any case (upper or lower).",
        "platform": "atcoder",
        "difficulty": "easy",
        "starter_code": "",
        "public_test_cases": json.dumps([{"input": "\n", "output": "Yes\n", "testtype": "stdin"}]),
        "private_test_cases": json.dumps([]),
        "metadata": "{}",
    }
    strict = dict(row, question_id="abc999_b", question_content="Print Yes.")
    path = write_jsonl(tmp_path / "lcb.jsonl", [row, strict])
    problems = {p.id: p for p in load_source(f"livecodebench:{path}", "t", split_mode="all")}
    assert await reward(sb, problems["abc999_a"], "print('YES')") == 1.0
    assert await reward(sb, problems["abc999_b"], "print('YES')") == 0.0


def openr1_row(pid: str) -> dict:
    return {
        "id": pid,
        "title": "Sum",
        "description": "Print a+b.",
        "input_format": "Two integers.",
        "output_format": "Their sum.",
        "interaction_format": None,
        "examples": [{"input": "1 2\n", "output": "3\n"}],
        "official_tests": [{"input": "5 5\n", "output": "10\n"}],
        "time_limit": 1.0,
        "memory_limit": 256.0,
        "input_mode": "stdio",
        "generated_checker": None,
        "rating": 800,
        "tags": [],
    }


def test_openr1_split_mode_json_array_and_gzipped_jsonl(tmp_path: Path):
    rows = [openr1_row(f"{i}A") for i in range(30)]
    array = tmp_path / "cf.json"
    array.write_text(json.dumps(rows))
    gz = tmp_path / "cf.jsonl.gz"
    gz.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    for path in (array, gz):
        every = load_source(f"openr1:{path}", "test", split_mode="all")
        assert len(every) == 30
        train = load_source(f"openr1:{path}", "train")
        test = load_source(f"openr1:{path}", "test")
        assert len(train) + len(test) == 30 and {p.id for p in train}.isdisjoint(p.id for p in test)
    with pytest.raises(ValueError, match="split_mode='some'; choose one of"):
        load_source(f"openr1:{array}", "train", split_mode="some")


def test_every_row_loader_reads_gzipped_jsonl(tmp_path: Path):
    rows = [gfg_row("maxsum")]
    gz = tmp_path / "taco.jsonl.gz"
    gz.write_bytes(gzip.compress(json.dumps(rows[0]).encode() + b"\n"))
    [problem] = load_source(f"taco:{gz}", "t", split_mode="all")
    assert problem.function_name == "Solution.maxSum"
    lcb = tmp_path / "lcb.json.gz"
    lcb.write_bytes(gzip.compress(json.dumps([{
        "question_id": "q1", "question_title": "t", "question_content": "Print 1.",
        "platform": "atcoder", "difficulty": "easy", "starter_code": "",
        "public_test_cases": json.dumps([{"input": "", "output": "1\n", "testtype": "stdin"}]),
        "private_test_cases": "[]", "metadata": "{}",
    }]).encode()))  # fmt: skip
    assert [p.id for p in load_source(f"livecodebench:{lcb}", "t", split_mode="all")] == ["q1"]
