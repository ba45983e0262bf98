"""Registration: short names, full ids, a user's own gymnasium.register, and helpful errors."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envs
from envs.arithmetic import ArithmeticEnv
from envs.base import TextEnv


class EchoEnv(TextEnv):
    """A user env defined in a test: reward 1 when the answer repeats the prompt."""

    def __init__(self, word: str = "hi") -> None:
        super().__init__()
        self.word = word

    def load_tasks(self, split):
        return [{"id": f"{split}-0", "word": self.word}]

    def initial_messages(self, task):
        return [{"role": "user", "content": f"Say {task['word']}"}]

    def step(self, action):
        reward = float(action.strip() == self._require_task()["word"])
        return [], reward, True, False, {"turn_reward": reward}


class NotAText(gym.Env):
    pass


def test_builtin_ids_are_registered_in_the_gspo_namespace():
    ids = envs.registered_ids()
    for env_id in ("gspo/Arithmetic-v0", "gspo/Math-v0", "gspo/MathTool-v0", "gspo/Codeforces-v0"):
        assert env_id in ids
        assert gym.spec(env_id).namespace == "gspo"
        assert isinstance(
            gym.spec(env_id).entry_point, str
        )  # lazy: nothing imported at registration


def test_short_name_and_full_id_build_the_same_class():
    assert type(envs.make("arithmetic")) is type(envs.make("gspo/Arithmetic-v0")) is ArithmeticEnv


def test_make_passes_kwargs_to_the_env():
    env = envs.make("arithmetic", difficulty=4, max_operand=5)
    assert env.level.max_operand == 5 and env.level.operators == "+-*"


def test_unknown_name_lists_ids_and_suggests_the_closest():
    with pytest.raises(ValueError) as err:
        envs.make("arithmatic")
    message = str(err.value)
    assert "Did you mean 'arithmetic'" in message
    assert "gspo/Math-v0" in message and "gspo/Codeforces-v0" in message


def test_wrong_case_id_is_suggested():
    with pytest.raises(ValueError, match="gspo/Math-v0"):
        envs.make("gspo/math-v0")


def test_a_users_own_gymnasium_registration_is_made_by_id():
    gym.register(id="usertest/Echo-v0", entry_point=EchoEnv, kwargs={"word": "yo"})
    try:
        env = envs.make("usertest/Echo-v0")
        assert isinstance(env, EchoEnv) and env.word == "yo"
        task = env.load_tasks("train")[0]
        env.reset(options={"task": task})
        assert env.step("yo")[1] == 1.0
        assert "usertest/Echo-v0" in envs.registered_ids()
        assert "CartPole-v1" not in envs.registered_ids()
        assert envs.make("usertest/Echo-v0", word="other").word == "other"
    finally:
        del gym.registry["usertest/Echo-v0"]


def test_an_env_that_is_not_a_text_env_is_rejected_with_the_fix():
    gym.register(id="usertest/Plain-v0", entry_point=NotAText)
    try:
        with pytest.raises(TypeError, match="subclass envs.base.TextEnv"):
            envs.make("usertest/Plain-v0")
    finally:
        del gym.registry["usertest/Plain-v0"]


def test_importing_envs_does_not_import_heavy_dependencies():
    import subprocess
    import sys

    code = "import sys, envs; envs.registered_ids(); print(sorted(m for m in ('torch', 'math_verify', 'sympy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
