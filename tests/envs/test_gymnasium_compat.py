"""The built-in envs are plain Gymnasium envs: `reset()` without a task samples one from the train
split with the env's seeded RNG, and Gymnasium's own `check_env` passes for each of them.

codeforces and the tool envs step through the real sandbox (random text as the action: a compile
error or a wrong answer, judged for real); under CI=true a missing sandbox fails the test. The
tool envs (MathTool-v1, CodeAgent-v0) are async for the trainer; plain `reset`/`step`/`close` run
them on a loop of their own, with the session opened at the first step.
"""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.base import MessagesSpace

# OpenEnv-v0 is a client of a server it is given (env.kwargs.url): tests/envs/test_openenv.py
BUILT_IN = sorted(k for k in gym.registry if k.startswith("gspo/") and k != "gspo/OpenEnv-v0")


def test_every_built_in_env_is_checked():
    assert len(BUILT_IN) >= 7 and "gspo/CodeAgent-v0" in BUILT_IN and "gspo/MathTool-v1" in BUILT_IN


@pytest.mark.parametrize("name", BUILT_IN)
def test_check_env_passes(name):
    env = envs.make(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Gymnasium's warnings count as failures here
            check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_reset_without_a_task_samples_a_training_task_reproducibly():
    env = envs.make("arithmetic")
    train_prompts = {env.initial_messages(t)[-1]["content"] for t in env.load_tasks("train")}
    first, info = env.reset(seed=7)
    again, _ = env.reset(seed=7)
    assert first == again and info["task_id"]
    assert first[-1]["content"] in train_prompts
    seen = {env.reset(seed=s)[0][-1]["content"] for s in range(20)}
    assert len(seen) > 1  # the seed picks the task


def test_messages_space_accepts_chat_messages_only():
    space = MessagesSpace()
    assert space.contains([{"role": "user", "content": "hi"}])
    assert space.contains([])
    assert not space.contains("hi")
    assert not space.contains([{"content": "no role"}])
    assert space.contains(space.sample())


def test_env_classes_declare_whether_they_need_a_sandbox():
    assert envs.env_class("codeforces").needs_sandbox
    assert envs.env_class("mathtool").needs_sandbox
    assert not envs.env_class("arithmetic").needs_sandbox
    assert not envs.env_class("math").needs_sandbox


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_a_tool_env_driven_by_plain_step_keeps_its_session_across_turns_and_closes_it():
    import sandbox.sessions.pool

    env = envs.make("gspo/MathTool-v1")
    env.reset(seed=0)  # renders the prompt only: no session yet
    assert env._sync_loop is None
    first, reward, terminated, truncated, _ = env.step(call("python", code="x = 41"))
    assert (reward, terminated, truncated) == (0.0, False, False)
    second, *_ = env.step(call("python", code="print(x + 1)"))
    assert second == [{"role": "tool", "content": "42\n"}]  # the kernel kept x
    env.reset(seed=1)  # a new episode: a new session, the old one closed
    fresh, *_ = env.step(call("python", code="print('x' in globals())"))
    assert fresh[0]["content"].strip() == "False"
    loop = env._sync_loop
    env.close()
    assert loop.is_closed() and loop not in sandbox.sessions.pool._default_pools


def test_closing_a_stepped_env_closes_the_grading_sandbox_it_made(monkeypatch):
    """CodeAgent-v0 without a shared sandbox makes its own to grade in; a plain `close` after a
    `reset` (no episode open) still closes it, before its loop goes (else its warm runner
    process outlives the loop: "Event loop is closed" at exit)."""
    from sandbox import Sandbox

    closed = []
    real = Sandbox.aclose

    async def counting(self):
        closed.append(self)
        await real(self)

    monkeypatch.setattr(Sandbox, "aclose", counting)
    env = envs.make("gspo/CodeAgent-v0")
    env.reset(seed=0)
    *_, terminated, _, info = env.step(call("submit"))  # graded: the env makes its sandbox
    assert terminated and env.unwrapped._sandbox is not None, info
    judge = env.unwrapped._sandbox
    env.reset(seed=1)  # ends the episode's session, not the env
    env.close()
    assert closed == [judge] and env.unwrapped._sandbox is None
