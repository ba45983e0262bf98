"""Tiny problem sets in the published schemas, written by this project for the loader tests.

Field names and layout follow the public datasets: deepmind/code_contests, BAAI/TACO,
codeparrot/apps, livecodebench/code_generation_lite, openai/openai_humaneval, mbpp. Each
writer returns the path a user would pass as `source=FORMAT:PATH`.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

ADD_PY = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_CPP = "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b;}\n"


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def code_contests_rows() -> list[dict[str, Any]]:
    base = {
        "source": 2,
        "difficulty": 7,
        "incorrect_solutions": {"language": [3], "solution": ["print(0)"]},
        "cf_contest_id": 1,
        "cf_index": "A",
        "cf_points": 500.0,
        "is_description_translated": False,
        "untranslated_description": "",
        "memory_limit_bytes": 256 * 1024 * 1024,
    }
    return [
        {
            **base,
            "name": "1_A. Add",
            "description": "Add two numbers.",
            "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
            "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
            "generated_tests": {"input": ["-1 1\n", "7 0\n"], "output": ["0\n", "7\n"]},
            "solutions": {"language": [1, 2, 3], "solution": ["print 3", ADD_CPP, ADD_PY]},
            "cf_rating": 800,
            "cf_tags": ["math"],
            "time_limit": {"seconds": 1, "nanos": 500_000_000},
            "input_file": "",
            "output_file": "",
        },
        {
            **base,
            "name": "2_B. Files",
            "description": "Read input.txt.",
            "public_tests": {"input": ["1\n"], "output": ["1\n"]},
            "private_tests": {"input": [], "output": []},
            "generated_tests": {"input": [], "output": []},
            "solutions": {"language": [], "solution": []},
            "cf_rating": 0,
            "cf_tags": [],
            "time_limit": None,
            "input_file": "input.txt",
            "output_file": "output.txt",
        },
    ]


def write_code_contests(root: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / "code_contests_test.parquet"
    pq.write_table(pa.Table.from_pylist(code_contests_rows()), path)
    return path


def taco_rows() -> list[dict[str, Any]]:
    common = {
        "raw_tags": "['Math']",
        "source": "codeforces",
        "tags": "['Mathematics']",
        "skill_types": "[]",
        "url": "https://example.invalid/p",
        "Expected Auxiliary Space": None,
        "date": None,
        "picture_num": "0",
        "Expected Time Complexity": None,
    }
    return [
        {
            **common,
            "question": "Add two numbers given on one line.",
            "solutions": json.dumps([ADD_PY]),
            "starter_code": "",
            "input_output": json.dumps(
                {"inputs": ["1 2\n", "3 4\n", "10 -10\n"], "outputs": ["3\n", "7\n", "0\n"]}
            ),
            "difficulty": "EASY",
            "name": "Add",
            "time_limit": "1 second",
            "memory_limit": "256 megabytes",
        },
        {
            **common,
            "question": "Return twice x.",
            "solutions": json.dumps(["def double(x):\n    return 2 * x\n"]),
            "starter_code": "def double(x):",
            "input_output": json.dumps(
                {"fn_name": "double", "inputs": [[1], [5], [-2]], "outputs": [[2], [10], [-4]]}
            ),
            "difficulty": "EASY",
            "name": "Double",
            "time_limit": None,
            "memory_limit": None,
        },
    ]


def write_taco(root: Path) -> Path:
    import datasets

    rows = taco_rows()
    saved = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:1])}
    )
    saved.save_to_disk(str(root / "taco"))
    return root / "taco"


def apps_rows() -> list[dict[str, Any]]:
    return [
        {
            "problem_id": 4001,
            "question": "Given a and b, print a+b.",
            "solutions": json.dumps([ADD_PY]),
            "input_output": json.dumps({"inputs": ["2 2\n", "0 5\n"], "outputs": ["4\n", "5\n"]}),
            "difficulty": "introductory",
            "url": "https://example.invalid/4001",
            "starter_code": "",
        },
        {
            "problem_id": 4002,
            "question": "Implement Solution.maxOf(nums): the largest element.",
            "solutions": json.dumps(
                ["class Solution:\n    def maxOf(self, nums):\n        return max(nums)\n"]
            ),
            "input_output": json.dumps(
                {"fn_name": "maxOf", "inputs": [[[1, 5, 2]], [[-3]]], "outputs": [[5], [-3]]}
            ),
            "difficulty": "interview",
            "url": "https://example.invalid/4002",
            "starter_code": "class Solution:\n    def maxOf(self, nums):\n        ",
        },
    ]


def write_apps(root: Path) -> Path:
    for split in ("train", "test"):
        _jsonl(root / f"apps_{split}.jsonl", apps_rows())
    return root / "apps_{split}.jsonl"


def compress_tests(tests: list[dict[str, Any]]) -> str:
    """LiveCodeBench's form of large private tests: base64(zlib(pickle(json text)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def livecodebench_rows() -> list[dict[str, Any]]:
    return [
        {
            "question_title": "Echo Sum",
            "question_content": "Read N and N integers; print their sum.",
            "platform": "atcoder",
            "question_id": "abc001_a",
            "contest_id": "abc001",
            "contest_date": "2024-01-01T00:00:00",
            "starter_code": "",
            "difficulty": "easy",
            "public_test_cases": json.dumps(
                [{"input": "2\n1 2\n", "output": "3\n", "testtype": "stdin"}]
            ),
            "private_test_cases": compress_tests(
                [
                    {"input": "3\n1 1 1\n", "output": "3\n", "testtype": "stdin"},
                    {"input": "1\n-5\n", "output": "-5\n", "testtype": "stdin"},
                ]
            ),
            "metadata": "{}",
        },
        {
            "question_title": "Two Sum",
            "question_content": "Return indices of the two numbers that add up to target.",
            "platform": "leetcode",
            "question_id": "1",
            "contest_id": "weekly-1",
            "contest_date": "2024-01-02T00:00:00",
            "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
            "difficulty": "easy",
            "public_test_cases": json.dumps(
                [{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional"}]
            ),
            "private_test_cases": json.dumps(
                [{"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional"}]
            ),
            "metadata": json.dumps({"func_name": "twoSum"}),
        },
    ]


def write_livecodebench(root: Path) -> Path:
    return _jsonl(root / "test.jsonl", livecodebench_rows())


HUMANEVAL_ROWS = [
    {
        "task_id": "HumanEval/0",
        "prompt": 'def add(x: int, y: int) -> int:\n    """Add two numbers."""\n',
        "canonical_solution": "    return x + y\n",
        "test": (
            "\n\nMETADATA = {'author': 'jt', 'dataset': 'test'}\n\n\ndef check(candidate):\n"
            "    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"
            "    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-6\n"
            "    assert True, 'This prints if this assert fails 1 (good for debugging!)'\n"
        ),
        "entry_point": "add",
    },
    {
        "task_id": "HumanEval/1",
        "prompt": "def is_even(n):\n",
        "canonical_solution": "    return n % 2 == 0\n",
        "test": "def check(candidate):\n    assert candidate(2)\n    assert not candidate(3)\n"
        "    assert candidate(4) is True\n",
        "entry_point": "is_even",
    },
    {
        "task_id": "HumanEval/2",
        "prompt": "def roots(c):\n",
        "canonical_solution": "    return 0.0\n",
        "test": "def check(candidate):\n    for c in range(3):\n"
        "        assert abs(poly(c, candidate(c))) < 1e-6\n",
        "entry_point": "roots",
    },
]


def write_humaneval(root: Path) -> Path:
    import datasets

    datasets.Dataset.from_list(HUMANEVAL_ROWS).save_to_disk(str(root / "he"))
    return next((root / "he").glob("*.arrow"))


MBPP_ROWS = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given character.",
        "code": "def remove_Occ(s,ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
        "    return s if i < 0 else s[:i] + s[i + 1:]\n",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 12,
        "text": "Sort the rows.",
        "code": "def sort_rows(m):\n    return sorted(m)\n",
        "test_list": ["assert sort_rows({(1, 2)}) == {(1, 2)}"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
]


def write_mbpp(root: Path) -> Path:
    return _jsonl(root / "mbpp.jsonl", MBPP_ROWS)
