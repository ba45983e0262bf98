"""The problem-set loaders on fixtures in the published schemas (tests/envs/loader_fixtures.py):
field mapping, splits, refusals with the reason, and reference solutions judged for real."""

from __future__ import annotations

import base64
import logging
import pickle
import sys
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))
import loader_fixtures as fx  # noqa: E402
from sbtest_util import make_sandbox  # noqa: E402

from envs.codeforces.env import CodeforcesEnv, judge_spec, render_prompt  # noqa: E402
from envs.codeforces.loaders import FORMATS, load_source, parse_source  # noqa: E402
from envs.codeforces.loaders.livecodebench import decode_tests  # noqa: E402
from envs.codeforces.problems import Problem  # noqa: E402
from envs.errors import TaskError  # noqa: E402
from sandbox import Sandbox, TestCase  # noqa: E402
from sandbox.judging.functional import function_case  # noqa: E402

SAMPLE_SET = Path(__file__).resolve().parents[2] / "envs" / "data" / "kattis_sample"


def case(test) -> dict:
    """The function-style row a problem's test encodes (args, expected)."""
    return function_case(TestCase(test.input, test.output))


def by_id(problems: list[Problem]) -> dict[str, Problem]:
    return {p.id: p for p in problems}


def test_source_spelling_is_checked_and_names_the_formats():
    assert parse_source("kattis:/a/b") == ("kattis", "/a/b")
    with pytest.raises(ValueError, match="code_contests"):
        parse_source("katis:/a")
    with pytest.raises(ValueError, match="FORMAT:PATH"):
        CodeforcesEnv(source="/just/a/path")
    assert set(FORMATS) >= {"kattis", "code_contests", "taco", "apps", "livecodebench"}


def test_code_contests_parquet_maps_tests_limits_and_references(tmp_path: Path):
    path = fx.write_code_contests(tmp_path)
    problems = load_source(f"code_contests:{path}", "test", split_mode="all", skip_unsupported=True)
    [add] = problems  # the input_file row is skipped
    assert add.id == "1_A. Add" and add.statement == "Add two numbers."
    assert [t.input for t in add.samples] == ["1 2\n"]
    assert [t.output for t in add.tests] == ["10\n", "0\n", "7\n"]  # private + generated
    assert (add.time_limit_s, add.memory_mb, add.tier) == (1.5, 256, "800")
    assert add.reference == {"cpp": fx.ADD_CPP, "python": fx.ADD_PY}
    fewer = load_source(
        f"code_contests:{path}", "test", split_mode="all", skip_unsupported=True,
        include_generated=False,
    )  # fmt: skip
    assert len(fewer[0].tests) == 1
    with pytest.raises(TaskError, match="2_B. Files.*input_file"):
        load_source(f"code_contests:{path}", "test", split_mode="all")


def test_taco_save_to_disk_dict_gives_splits_and_function_problems(tmp_path: Path):
    path = fx.write_taco(tmp_path)
    train = load_source(f"taco:{path}", "train")
    assert len(train) == 2 and len(load_source(f"taco:{path}", "test")) == 1
    add, double = train
    assert (add.time_limit_s, add.memory_mb, add.tags) == (1.0, 256, ("Mathematics",))
    assert len(add.samples) == 1 and len(add.tests) == 2 and add.function_name is None
    assert double.function_name == "double"
    assert case(double.tests[0])["expected"] == 10  # [10] unwrapped to 10
    with pytest.raises(TaskError, match="no split 'valid'"):
        load_source(f"taco:{path}", "valid")


def test_apps_jsonl_with_split_in_the_path_and_leetcode_methods(tmp_path: Path):
    path = fx.write_apps(tmp_path)
    problems = by_id(load_source(f"apps:{path}", "test"))
    assert set(problems) == {"apps-4001", "apps-4002"}
    method = problems["apps-4002"]
    assert method.function_name == "Solution.maxOf" and "class Solution" in method.starter_code
    assert "defines `Solution.maxOf`" in render_prompt(method)


def test_livecodebench_reads_compressed_tests_and_functional_rows(tmp_path: Path):
    path = fx.write_livecodebench(tmp_path)
    problems = by_id(load_source(f"livecodebench:{path}", "test", split_mode="all"))
    stdin = problems["abc001_a"]
    assert [t.output for t in stdin.tests] == ["3\n", "-5\n"]  # decompressed
    two_sum = problems["1"]
    assert two_sum.function_name == "Solution.twoSum"
    assert case(two_sum.samples[0])["args"] == [[2, 7, 11, 15], 9]


def test_livecodebench_refuses_pickles_that_name_code():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    blob = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(TaskError, match="data only"):
        decode_tests(blob)


def test_humaneval_asserts_become_value_tests_and_odd_ones_are_refused(tmp_path, caplog):
    path = fx.write_humaneval(tmp_path)
    with caplog.at_level(logging.WARNING):
        problems = by_id(
            load_source(f"humaneval:{path}", "test", split_mode="all", skip_unsupported=True)
        )
    assert set(problems) == {"HumanEval/0", "HumanEval/1"}
    assert "skipped 1 rows" in caplog.text and "HumanEval/2" in caplog.text
    add = problems["HumanEval/0"]
    assert add.function_name == "add" and len(add.all_tests) == 3  # `assert True` ignored
    assert add.judge.mode == "float" and add.judge.abs_tol == 1e-6
    expected = [case(t)["expected"] for t in problems["HumanEval/1"].all_tests]
    assert expected == [True, False, True]
    with pytest.raises(TaskError, match="HumanEval/2"):
        load_source(f"humaneval:{path}", "test", split_mode="all")


def test_mbpp_finds_the_function_name_in_the_tests(tmp_path: Path):
    path = fx.write_mbpp(tmp_path)
    problems = load_source(f"mbpp:{path}", "train", split_mode="all", skip_unsupported=True)
    [remove] = problems  # task 12 compares sets: refused
    assert remove.function_name == "remove_Occ" and len(remove.all_tests) == 3
    assert 'remove_Occ("hello","l")' in remove.statement


def test_hash_split_is_deterministic_and_disjoint(tmp_path: Path):
    rows = [dict(fx.MBPP_ROWS[0], task_id=i) for i in range(40)]
    path = fx._jsonl(tmp_path / "many.jsonl", rows)
    train = {p.id for p in load_source(f"mbpp:{path}", "train")}
    test = {p.id for p in load_source(f"mbpp:{path}", "test")}
    assert train and test and not train & test and len(train | test) == 40
    assert test == {p.id for p in load_source(f"mbpp:{path}", "test")}


def test_kattis_source_loads_the_sample_set_with_judges():
    train = by_id(load_source(f"kattis:{SAMPLE_SET}/{{split}}", "train"))
    assert set(train) == {"addtwo", "divisor", "halve", "hello"}
    assert not judge_spec(train["hello"]).case_sensitive
    spec = judge_spec(train["divisor"])
    assert spec.checker_protocol == "kattis" and spec.checker_args == ("case_insensitive_none",)
    assert train["addtwo"].reference["python"].startswith("a, b = map(int")
    test = by_id(load_source(f"kattis:{SAMPLE_SET}/{{split}}", "test"))
    assert set(test) == {"maximum", "subtract"}
    env = CodeforcesEnv(source=f"kattis:{SAMPLE_SET}/{{split}}")
    rows = env.load_tasks("train")
    assert Problem.from_row(rows[0]).to_row() == rows[0]  # rows survive the round trip


# ---- judged for real ------------------------------------------------------------------------
@pytest.fixture
async def sb() -> AsyncIterator[Sandbox]:
    sandbox = make_sandbox("bubblewrap")
    try:
        yield sandbox
    finally:
        await sandbox.aclose()


async def _judge(sb: Sandbox, problem: Problem, answer: str) -> dict:
    env = CodeforcesEnv(sandbox=sb)
    env.reset(options={"task": problem.to_row()})
    _, reward, _, _, info = await env.astep(answer)
    info["reward"] = reward
    return info


def block(source: str, language: str = "python") -> str:
    return f"```{language}\n{source}\n```"


async def test_every_format_judges_its_reference_and_rejects_a_wrong_answer(sb, tmp_path):
    cases = [
        load_source(f"code_contests:{fx.write_code_contests(tmp_path)}", "t", split_mode="all",
                    skip_unsupported=True)[0],
        *load_source(f"taco:{fx.write_taco(tmp_path)}", "train"),
        *load_source(f"apps:{fx.write_apps(tmp_path)}", "train"),
        *load_source(f"humaneval:{fx.write_humaneval(tmp_path)}", "test", split_mode="all",
                     skip_unsupported=True),
        *load_source(f"mbpp:{fx.write_mbpp(tmp_path)}", "test", split_mode="all",
                     skip_unsupported=True),
        *load_source(f"kattis:{SAMPLE_SET}/{{split}}", "train"),
    ]  # fmt: skip
    for problem in cases:
        for language, source in problem.reference.items():
            info = await _judge(sb, problem, block(source, language))
            assert info["reward"] == 1.0, (problem.id, language, info)
        wrong = await _judge(sb, problem, block("print('nope')\ndef nothing():\n    pass"))
        assert wrong["reward"] == 0.0, problem.id


async def test_livecodebench_functional_and_kattis_case_rules_in_the_sandbox(sb, tmp_path):
    problems = by_id(
        load_source(f"livecodebench:{fx.write_livecodebench(tmp_path)}", "t", split_mode="all")
    )
    two_sum = (
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n"
    )
    assert (await _judge(sb, problems["1"], block(two_sum)))["reward"] == 1.0
    total = "input()\nprint(sum(map(int, input().split())))"
    assert (await _judge(sb, problems["abc001_a"], block(total)))["reward"] == 1.0
    kattis = by_id(load_source(f"kattis:{SAMPLE_SET}/train", "train", split_mode="all"))
    shout = await _judge(sb, kattis["hello"], block("print('HELLO world!')"))
    assert shout["reward"] == 1.0  # Kattis's default validator ignores case
    cpp_for_function = await _judge(sb, problems["1"], block("int main(){}", "cpp"))
    assert cpp_for_function["verdict"] == "wrong_language"


def test_assert_values_may_be_constant_arithmetic_but_nothing_runs():
    from envs.codeforces.loaders.humaneval_mbpp import Unsupported, assert_cases

    code = (
        "def check(candidate):\n"
        "    assert candidate([3, 5, 7]) == (3 + 5 + 7, 3 * 5 * 7)\n"
        "    assert abs(candidate([1.0, 2.0, 3.0]) - 2.0/3.0) < 1e-6\n"
        "    assert candidate('ab' * 2) == -(-4)\n"
    )
    cases, tolerance = assert_cases(code, {"candidate"})
    assert [c["expected"] for c in cases] == [(15, 105), 2.0 / 3.0, 4]
    assert cases[2]["args"] == ["abab"] and tolerance == 1e-6
    for bad in ("10**10**10", "'a' * 10**9", "__import__('os').getpid()", "len([1])"):
        with pytest.raises(Unsupported):
            assert_cases(f"assert candidate(1) == {bad}", {"candidate"})
