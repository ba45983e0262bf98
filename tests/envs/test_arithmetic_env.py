"""Arithmetic-v0: exact rewards, disjoint deterministic splits, SFT references that score 1."""

from __future__ import annotations

import asyncio

import pytest

from envs.arithmetic import LEVELS, ArithmeticEnv, _eval


def run(env, task, text):
    env.reset(options={"task": task})
    return env.step(text)


@pytest.mark.parametrize("difficulty", sorted(LEVELS))
def test_reference_responses_score_one(difficulty):
    env = ArithmeticEnv(difficulty, num_train=200, num_test=50, show_work=True)
    for task in env.load_tasks("train")[:100] + env.load_tasks("test"):
        _, reward, terminated, truncated, info = run(env, task, env.reference_response(task))
        assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)


def test_answers_match_python_precedence():
    env = ArithmeticEnv(5, num_train=300)
    for task in env.load_tasks("train"):
        assert task["answer"] == eval(task["expr"])  # noqa: S307 -- our own digits and + - *


def test_eval_respects_precedence():
    assert _eval([3, 4, 5], ["+", "*"]) == 23
    assert _eval([10, 2, 3], ["-", "-"]) == 5
    assert _eval([2, 3, 4, 5], ["*", "-", "*"]) == -14


def test_splits_are_disjoint_and_deterministic():
    env = ArithmeticEnv(3, num_train=1000, num_test=200, seed=7)
    train, test = env.load_tasks("train"), env.load_tasks("test")
    assert len(train) == 1000 and len(test) == 200
    assert not {t["expr"] for t in train} & {t["expr"] for t in test}
    assert train == ArithmeticEnv(3, num_train=1000, num_test=200, seed=7).load_tasks("train")
    assert train != ArithmeticEnv(3, num_train=1000, num_test=200, seed=8).load_tasks("train")
    assert len({t["id"] for t in train}) == len(train)


def test_small_problem_spaces_return_what_exists():
    env = ArithmeticEnv(1, num_train=5000)
    train, test = env.load_tasks("train"), env.load_tasks("test")
    assert len(train) + len(test) == 100  # every a+b with a, b in 0..9, each in exactly one split


def test_prompt_is_short():
    env = ArithmeticEnv(2)
    task = env.load_tasks("train")[0]
    messages, _ = env.reset(options={"task": task})
    assert messages == [{"role": "user", "content": f"Compute {task['expr']}."}]


@pytest.mark.parametrize(
    "text, reward, format_ok",
    [
        ("\\boxed{19}", 1.0, True),
        ("12+7=19 so \\boxed{ 19 }", 1.0, True),
        ("\\boxed{18}", 0.0, True),
        ("\\boxed{20} no wait \\boxed{19}", 1.0, True),  # the last box counts
        ("19", 0.0, False),  # right number, no box
        ("\\boxed{19.0}", 0.0, False),
        ("\\boxed{nineteen}", 0.0, False),
        ("", 0.0, False),
        ("\\boxed{19", 0.0, False),
        ("\udc80\\boxed{19}\ud800", 1.0, True),  # lone surrogates (invalid UTF-8) are harmless
        ("\\boxed{" * 200_000, 0.0, False),  # about 1 MB of unbalanced boxes
        ("x" * (1 << 20) + "\\boxed{19}", 1.0, True),
        ("\\boxed{" + "9" * 5000 + "}", 0.0, False),
    ],
    ids=[
        "boxed",
        "spaces",
        "wrong",
        "last-box",
        "no-box",
        "float",
        "word",
        "empty",
        "unclosed",
        "surrogates",
        "1MB-unbalanced",
        "1MB-then-box",
        "huge-number",
    ],
)
def test_rewards(text, reward, format_ok):
    env = ArithmeticEnv(1)
    _, r, terminated, _, info = run(env, {"id": "t", "expr": "12+7", "answer": 19}, text)
    assert (r, info["format_ok"], terminated) == (reward, format_ok, True)
    assert info["turn_reward"] == r and info["expected"] == 19


def test_astep_equals_step():
    env = ArithmeticEnv(2)
    task = env.load_tasks("test")[0]
    env.reset(options={"task": task})
    assert asyncio.run(env.astep("\\boxed{0}")) == env.step("\\boxed{0}")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"difficulty": 9}, "difficulty"),
        ({"operators": "/"}, "operators"),
        ({"max_operand": 0}, "max_operand"),
        ({"num_operands": 1}, "num_operands"),
        ({"prompt_template": "no slot"}, "prompt_template"),
    ],
)
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ArithmeticEnv(**kwargs)


def test_step_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="reset"):
        ArithmeticEnv().step("\\boxed{1}")
