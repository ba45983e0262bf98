"""Math-v0 episodes: any model output gets a reward, never an exception."""

from __future__ import annotations

import asyncio

import pytest

import envs
from envs.math.env import MathEnv
from envs.math.verify import VerifierPool

TASK = {"id": "half", "question": "What is one half?", "answer": "\\frac{1}{2}"}


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(max_workers=1)
    yield p
    p.close()


@pytest.fixture
def env(pool):
    e = envs.make("math", pool=pool)
    e.reset(options={"task": TASK})
    return e


def test_prompt_asks_for_a_boxed_answer(pool):
    messages, info = MathEnv(pool=pool).reset(options={"task": TASK})
    assert messages[0]["role"] == "user" and "What is one half?" in messages[0]["content"]
    assert "\\boxed{}" in messages[0]["content"] and info["task_id"] == "half"


@pytest.mark.parametrize(
    "text, reward, format_ok",
    [
        ("The answer is \\boxed{0.5}.", 1.0, True),
        ("\\boxed{\\dfrac{1}{2}}", 1.0, True),
        ("\\boxed{1/3}", 0.0, True),
        ("", 0.0, False),
        ("one half, 0.5", 0.0, False),  # right value, no box
        ("\\boxed{", 0.0, False),
        ("\\boxed{}", 0.0, True),
        ("\\boxed{???}", 0.0, True),
        ("\\boxed{\\frac{1}{2}" + "}" * 3, 1.0, True),
        ("\udc80\udcff \\boxed{0.5} \ud800", 1.0, True),  # lone surrogates from invalid UTF-8
        ("a" * (1 << 20), 0.0, False),  # 1 MB, no box
        ("\\boxed{" * 150_000, 0.0, False),  # ~1 MB of unbalanced boxes
        ("\\boxed{" + "1+" * 500_000 + "1}", 0.0, True),  # 1 MB inside the box: not sent to sympy
    ],
    ids=[
        "boxed-decimal",
        "dfrac",
        "wrong",
        "empty",
        "no-box",
        "unclosed",
        "empty-box",
        "unreadable",
        "extra-braces",
        "surrogates",
        "1MB-no-box",
        "1MB-unbalanced",
        "1MB-in-box",
    ],
)
async def test_malformed_output_gets_a_reward(env, text, reward, format_ok):
    _, r, terminated, truncated, info = await env.astep(text)
    assert (r, info["format_ok"], terminated, truncated) == (reward, format_ok, True, False)
    assert info["turn_reward"] == r


def test_sync_step_scores_like_astep(env):
    assert env.step("\\boxed{0.5}")[1] == 1.0


async def test_many_envs_share_one_pool_concurrently(pool):
    async def one(i: int) -> float:
        e = MathEnv(pool=pool)
        e.reset(options={"task": {"id": str(i), "question": "q", "answer": str(i)}})
        return (await e.astep(f"\\boxed{{{i if i % 2 else i + 1}}}"))[1]

    rewards = await asyncio.gather(*(one(i) for i in range(20)))
    assert rewards == [float(i % 2) for i in range(20)]


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="prompt_template"):
        MathEnv(prompt_template="no slot")
    with pytest.raises(ValueError, match="verify_timeout_s"):
        MathEnv(verify_timeout_s=0)
    with pytest.raises(ValueError, match="split"):
        MathEnv().load_tasks("validation")
