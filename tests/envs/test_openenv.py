"""OpenEnv interop, tested against the real `openenv` package (its server and client classes).

Client side: `env=openenv env.kwargs.url=URL` plays and trains on a tiny OpenEnv MCP env
(tests/envs/openenv_echo_server.py) served by openenv's own `create_app` in a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openenv.core")

from envs.errors import InfraError  # noqa: E402
from envs.openenv.env import OpenEnvEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("openenv_echo_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the OpenEnv server at {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} not healthy after {timeout_s}s")


@pytest.fixture(scope="module")
def sum_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openenv")
    log = tmp / "episodes.log"
    port = free_port()
    env = {**os.environ, "SUM_ENV_LOG": str(log), "PYTHONPATH": str(ROOT)}
    # stderr to a file, never an unread pipe: a full pipe would block the server
    with open(tmp / "server.err", "w") as err:
        proc = subprocess.Popen([sys.executable, str(SERVER), str(port)], env=env, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, log
    finally:
        proc.kill()
        proc.wait(timeout=10)


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


async def play(url: str, action_for) -> tuple[list, list, tuple]:
    env = OpenEnvEnv(url=url)
    try:
        messages, _ = await env.areset(options={"task": {"id": "t", "seed": 5}})
        schemas = env.tool_schemas()
        return messages, schemas, await env.astep(action_for(messages[0]["content"]))
    finally:
        await env.aclose()


def test_an_episode_over_the_real_openenv_server(sum_server):
    url, _ = sum_server
    expr = lambda text: eval(text.split()[1])  # noqa: E731 - "Compute a+b and call answer."
    messages, schemas, (obs, reward, done, trunc, info) = asyncio.run(
        play(url, lambda text: call("answer", value=expr(text)))
    )
    assert messages[0]["role"] == "user" and messages[0]["content"].startswith("Compute ")
    fn = schemas[0]["function"]
    assert fn["name"] == "answer" and fn["parameters"]["properties"]["value"]["type"] == "integer"
    assert (reward, done, trunc, info["end"]) == (1.0, True, False, "done")
    _, _, (_, reward, done, _, _) = asyncio.run(play(url, lambda text: call("answer", value=99)))
    assert (reward, done) == (0.0, True)
    # no tool call: the episode ends with the env's last reward (0), nothing is sent
    _, _, (_, reward, done, _, info) = asyncio.run(play(url, lambda text: "I think 7."))
    assert (reward, done, info["end"]) == (0.0, True, "final")


def test_a_dead_server_is_an_infra_error_not_reward_0():
    env = OpenEnvEnv(url=f"http://127.0.0.1:{free_port()}", timeout_s=5)
    with pytest.raises(InfraError, match="connect failed"):
        asyncio.run(env.areset(options={"task": {"id": "t", "seed": 0}}))


def test_a_missing_url_names_the_fix():
    with pytest.raises(ValueError, match="env.kwargs.url"):
        OpenEnvEnv()


@pytest.mark.slow  # a real (tiny) training run, about a minute on 2 cores
def test_train_two_steps_on_an_openenv_server(sum_server, tmp_path):
    url, log = sum_server
    before = len(log.read_text().splitlines()) if log.exists() else 0
    run_dir = tmp_path / "run"
    readme = (ROOT / "README.md").read_text()
    line = next(
        x for x in readme.splitlines() if x.startswith("python -m gspo_agents.train env=openenv")
    )
    cmd = [
        sys.executable, *line.replace("http://localhost:8000", url).split()[1:],
        "trainer.steps=2", "trainer.tasks_per_step=2", "rollout.num_samples_per_task=2",
        "algorithm.filter_zero_spread_groups=false", "logger.wandb_mode=disabled",
        f"trainer.run_dir={run_dir}",
    ]  # fmt: skip
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["num_trajectories"] == 4 for r in rows)
    # every trajectory was an episode of the OpenEnv server (reset over /ws)
    assert len(log.read_text().splitlines()) - before >= 8
