"""A user's own env, shipped in their own installed package, is found through the entry-point
group `gspo_agents.envs` and made by id -- in this process and in a fresh one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import envs
from envs import registry

DIST = "gspo-echo-plugin-test"
MODULE = "gspo_echo_plugin_test"
ENV_ID = "myenv/Echo-v0"

PLUGIN_SOURCE = '''
"""A throwaway user package: one env, registered through the gspo_agents.envs entry point."""
import gymnasium as gym
from envs.base import TextEnv

WORDS = ["apple", "river", "stone", "cloud", "amber", "maple", "delta", "ember"]


class EchoEnv(TextEnv):
    """Say the word back: reward 1.0 when the answer contains it."""

    def load_tasks(self, split):
        words = WORDS[:6] if split == "train" else WORDS[6:]
        return [{"id": f"{split}-{i}", "word": w} for i, w in enumerate(words)]

    def reference_response(self, task):
        return task["word"]

    def initial_messages(self, task):
        return [{"role": "user", "content": f"Say {task['word']}."}]

    def step(self, action):
        reward = float(self._require_task()["word"] in action)
        return [], reward, True, False, {"turn_reward": reward}


def register():
    gym.register(id="myenv/Echo-v0", entry_point="gspo_echo_plugin_test:EchoEnv")
'''

PYPROJECT = f"""
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{DIST}"
version = "0.0.1"

[project.entry-points."gspo_agents.envs"]
echo = "{MODULE}:register"

[tool.setuptools]
py-modules = ["{MODULE}"]
"""


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


@pytest.fixture
def installed_plugin(tmp_path):
    """Build and pip-install the package from a temp dir (offline); uninstall afterwards."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent(PLUGIN_SOURCE))
    done = _pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(tmp_path))
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        _pip("uninstall", "-y", "-q", DIST)
        gym.registry.pop(ENV_ID, None)
        registry._plugins_loaded.discard(f"echo={MODULE}:register")
        sys.modules.pop(MODULE, None)


def test_installed_package_env_is_made_by_id(installed_plugin):
    env = envs.make(ENV_ID)  # installed after this process started: make() rescans entry points
    assert type(env).__name__ == "EchoEnv" and ENV_ID in envs.registered_ids()
    task = env.load_tasks("train")[0]
    messages, info = env.reset(options={"task": task})
    assert messages == [{"role": "user", "content": "Say apple."}] and info["task_id"] == "train-0"
    assert env.step(env.reference_response(task))[1] == 1.0
    env.reset(options={"task": task})
    assert env.step("pear")[1] == 0.0


def test_installed_package_env_in_a_fresh_process(installed_plugin):
    code = (
        "import envs; e = envs.make('myenv/Echo-v0'); t = e.load_tasks('test')[0];"
        "e.reset(options={'task': t}); print(e.step('say ' + t['word'])[1])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


def test_a_broken_plugin_warns_and_is_named_when_asked_for(tmp_path):
    # Installed into a private --target dir seen only by a subprocess, so that other test
    # processes sharing this Python never see the broken plugin.
    src, site = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    (src / "pyproject.toml").write_text(
        PYPROJECT.replace(DIST, "gspo-broken-plugin-test").replace(
            f"{MODULE}:register", "gspo_no_such_module:register"
        )
    )
    (src / f"{MODULE}.py").write_text("")
    done = _pip(
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
        "--target",
        str(site),
        str(src),
    )
    assert done.returncode == 0, done.stderr
    code = (
        "import envs\n"
        "assert type(envs.make('arithmetic')).__name__ == 'ArithmeticEnv'\n"
        "try:\n    envs.make('myenv/Echo-v0')\n"
        "except ValueError as e:\n    print(e)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "gspo_no_such_module" in out.stderr and "RuntimeWarning" in out.stderr  # the warning
    assert "gspo_no_such_module" in out.stdout  # and again in the unknown-env error


@pytest.mark.slow
def test_train_one_step_on_the_installed_env_with_one_override(installed_plugin, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "gspo_agents.train", f"env.name={ENV_ID}", "trainer.steps=1",
        "trainer.tasks_per_step=2", "rollout.num_samples_per_task=2", "trainer.sft.steps=2",
        "trainer.sft.batch_size=4", "algorithm.filter_zero_spread_groups=false",
        "logger.wandb_mode=disabled", f"trainer.run_dir={run_dir}",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"env: {ENV_ID}" in out.stderr
    row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 1 and row["num_trajectories"] == 4 and "loss" in row
