"""Math data: the shipped generated set, and loaders for JSONL / Parquet in both shapes."""

from __future__ import annotations

import json
import math
from collections import Counter
from fractions import Fraction
from itertools import permutations, product
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envs.errors import TaskError
from envs.math.data import DATA_DIR, builtin_tasks, load_math_file
from envs.math.env import MathEnv
from envs.math.generate import generate
from envs.math.verify import VerifierPool

SHARED = Path("/work/shared/data/math")


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(max_workers=2)
    yield p
    p.close()


# -- the shipped set -------------------------------------------------------------------------------
def test_shipped_set_is_large_balanced_and_split():
    train, test = builtin_tasks("train"), builtin_tasks("test")
    assert len(train) + len(test) >= 200 and len(test) >= 40
    topics = Counter(r["topic"] for r in train + test)
    assert set(topics) == {"arithmetic", "algebra", "number_theory", "combinatorics"}
    assert min(topics.values()) >= 40
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert len({r["id"] for r in train + test}) == len(train) + len(test)


def test_shipped_files_are_what_the_generator_writes():
    generated = generate()
    for split in ("train", "test"):
        lines = (DATA_DIR / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == generated[split]


def _brute(row) -> Fraction | int | None:
    """An independent, brute-force derivation of the answer from the row's parameters."""
    p, name = row["params"], row["template"]
    if name == "divisor_count":
        return sum(1 for d in range(1, p["n"] + 1) if p["n"] % d == 0)
    if name == "power_mod":
        x = 1
        for _ in range(p["k"]):
            x = x * p["a"] % p["m"]
        return x
    if name == "modular_inverse":
        return next(x for x in range(p["m"]) if p["a"] * x % p["m"] == 1)
    if name == "divisible_by_either":
        return sum(1 for i in range(1, p["n"] + 1) if i % p["a"] == 0 or i % p["b"] == 0)
    if name == "word_arrangements":
        return len(set(permutations(p["word"])))
    if name == "derangements" and p["n"] <= 8:
        return sum(all(a != b for a, b in enumerate(perm)) for perm in permutations(range(p["n"])))
    if name == "dice_sum":
        s = p["sides"]
        rolls = list(product(range(1, s + 1), repeat=2))
        return Fraction(sum(a + b == p["target"] for a, b in rolls), len(rolls))
    if name == "grid_paths_avoiding":
        return _grid_paths(p["w"], p["h"], (p["p"], p["s"]))
    if name == "stars_and_bars":
        return sum(1 for c in product(range(1, p["n"] + 1), repeat=p["k"]) if sum(c) == p["n"])
    if name == "linear_equation":
        x = Fraction(row["answer"].replace("\\frac{", "").replace("}{", "/").replace("}", ""))
        assert p["a"] * x + p["b"] == p["c"] * x + p["d"]
        return None
    if name == "series_sum":
        return sum(p["a"] + i * p["d"] for i in range(p["n"]))
    if name == "lcm_minus_gcd":
        a, b = p["a"], p["b"]
        lcm = next(m for m in range(max(a, b), a * b + 1) if m % a == 0 and m % b == 0)
        return lcm - math.gcd(a, b)
    return None


def _grid_paths(w: int, h: int, blocked: tuple[int, int]) -> int:
    ways = [[0] * (h + 1) for _ in range(w + 1)]
    ways[0][0] = 1
    for x in range(w + 1):
        for y in range(h + 1):
            if (x, y) == blocked or (x, y) == (0, 0):
                continue
            ways[x][y] = (ways[x - 1][y] if x else 0) + (ways[x][y - 1] if y else 0)
    return ways[w][h]


def test_generated_answers_match_brute_force():
    checked = 0
    for row in builtin_tasks("train") + builtin_tasks("test"):
        expected = _brute(row)
        if expected is None:
            continue
        answer = row["answer"]
        if "frac" in answer:
            num, den = answer.replace("-", "").removeprefix("\\frac{").removesuffix("}").split("}{")
            got = Fraction(int(num), int(den)) * (-1 if answer.startswith("-") else 1)
        else:
            got = int(answer)
        assert got == expected, row
        checked += 1
    assert checked >= 150


def test_every_shipped_gold_answer_is_readable_by_math_verify(pool):
    env = MathEnv(pool=pool)
    env.check_gold_answers(builtin_tasks("train") + builtin_tasks("test"))


def test_reference_responses_score_one_on_shipped_test(pool):
    env = MathEnv(pool=pool)
    for task in env.load_tasks("test")[:20]:
        env.reset(options={"task": task})
        assert env.step(env.reference_response(task))[1] == 1.0


# -- user data -------------------------------------------------------------------------------------
ROWS_QA = [{"question": "1+1?", "answer": "2"}, {"question": "Half?", "answer": "0.5"}]
ROWS_PS = [
    {"problem": "1+1?", "solution": "Clearly \\boxed{2}."},
    {"problem": "Half?", "solution": "We get \\boxed{\\frac{1}{2}} so done."},
]


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _write_parquet(path: Path, rows) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("writer, suffix", [(_write_jsonl, ".jsonl"), (_write_parquet, ".parquet")])
@pytest.mark.parametrize("rows", [ROWS_QA, ROWS_PS], ids=["question-answer", "problem-solution"])
def test_loaders_read_both_shapes(tmp_path, writer, suffix, rows):
    loaded = load_math_file(writer(tmp_path / f"data{suffix}", rows))
    assert [r["question"] for r in loaded] == ["1+1?", "Half?"]
    assert [r["answer"] for r in loaded] == ["2", "0.5" if rows is ROWS_QA else "\\frac{1}{2}"]
    assert [r["id"] for r in loaded] == ["data-0", "data-1"]


def test_numeric_answers_become_text(tmp_path):
    rows = [{"question": "a", "answer": 2}, {"question": "b", "answer": 0.5, "id": "x"}]
    loaded = load_math_file(_write_jsonl(tmp_path / "n.jsonl", rows))
    assert [(r["id"], r["answer"]) for r in loaded] == [("n-0", "2"), ("x", "0.5")]


async def test_user_file_scores_through_the_env(tmp_path, pool):
    env = MathEnv(pool=pool, train_path=_write_parquet(tmp_path / "t.parquet", ROWS_PS))
    task = env.load_tasks("train")[1]
    env.reset(options={"task": task})
    _, reward, *_ = await env.astep("So it is \\boxed{0.5}")
    assert reward == 1.0


@pytest.mark.parametrize(
    "row, message",
    [
        ({"answer": "2"}, "'question' or 'problem'"),
        ({"question": "q"}, "'answer' field or a 'solution'"),
        ({"question": "q", "solution": "no box here"}, "no \\\\boxed"),
        ({"question": "q", "answer": True}, "boolean"),
    ],
)
def test_malformed_rows_name_the_problem(tmp_path, row, message):
    with pytest.raises(TaskError, match=message):
        load_math_file(_write_jsonl(tmp_path / "bad.jsonl", [row]))


def test_bad_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "1"}\n{oops\n')
    with pytest.raises(TaskError, match="bad.jsonl:2"):
        load_math_file(path)


def test_unknown_suffix_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match=".parquet"):
        load_math_file(_write_jsonl(tmp_path / "x.csv", ROWS_QA))
    with pytest.raises(FileNotFoundError):
        load_math_file(tmp_path / "nope.jsonl")


# -- the public sets, read in place ----------------------------------------------------------------
@pytest.mark.parametrize("name, count", [("aime24", 30), ("math500", 500)])
def test_shared_public_sets_load_by_path(name, count, pool):
    path = SHARED / f"{name}.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    env = MathEnv(pool=pool, test_path=path)
    rows = env.load_tasks("test")
    assert len(rows) == count and all(r["question"] and r["answer"] for r in rows)
    env.check_gold_answers(rows[:100])
    env.reset(options={"task": rows[0]})
    assert env.step(env.reference_response(rows[0]))[1] == 1.0
