"""`env=openenv env.kwargs.image=IMAGE`: the project starts an OpenEnv server image in its sandbox.

The image is built offline (tests/envs/openenv_image.py: the sandbox image plus the host's
openenv-core, laid out as OpenEnv's Dockerfile template does), cached by a content hash. Under
CI=true a missing Docker engine FAILS these tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv.core")

from envs.errors import InfraError  # noqa: E402
from envs.openenv import container  # noqa: E402
from envs.openenv.env import OpenEnvEnv  # noqa: E402

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
import openenv_image  # noqa: E402
from timing import patience  # noqa: E402

START_S = patience(120)  # a cold server start: ~10 s idle, ~40 s at load 10 on 2 cores


def _unavailable(reason: str) -> None:
    message = f"Docker is unavailable for the OpenEnv image tests: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def image() -> str:
    from sandbox.errors import SandboxError
    from sandbox.isolation.image import ensure_image

    try:
        probe = subprocess.run(["docker", "version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(repr(exc))
    if probe.returncode != 0:
        _unavailable(probe.stderr.strip()[-300:])
    try:
        base = ensure_image()  # the sandbox image: the local base of the test image
    except SandboxError as exc:
        _unavailable(str(exc))
    tag, built_s = openenv_image.ensure_image(base)
    print(f"\nOpenEnv test image {tag}: " + (f"built in {built_s:.1f} s" if built_s else "cached"))
    return tag


def openenv_containers() -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "name=gspo-openenv-", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return [n for n in out.stdout.split() if n.startswith(f"gspo-openenv-{os.getpid()}-")]


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


async def play(env: OpenEnvEnv, seed: int, right: bool):
    try:
        messages, _ = await env.areset(options={"task": {"id": "t", "seed": seed}})
        value = eval(messages[0]["content"].split()[1])  # "Compute a+b and call answer."
        return messages, await env.astep(call("answer", value=value if right else value + 100))
    finally:
        await env.aclose()


def inspect(name: str) -> dict:
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout)[0]


def test_an_episode_on_an_image_started_in_the_sandbox(image):
    async def main():
        right = await play(OpenEnvEnv(image=image, server_start_timeout_s=START_S), 5, True)
        wrong = await play(OpenEnvEnv(image=image, server_start_timeout_s=START_S), 6, False)
        return right, wrong

    try:
        (messages, right), (_, wrong) = asyncio.run(main())
        [name] = openenv_containers()  # one server, shared by both episodes
        info = inspect(name)
        server = next(iter(container._servers.values()))
        sock_dir = os.path.dirname(server.socket_path)
    finally:
        container.close_servers()
    assert messages[0]["content"].startswith("Compute ")
    assert right[1:4] == (1.0, True, False) and right[4]["end"] == "done"
    assert wrong[1:3] == (0.0, True)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["Memory"] == 2048 * 2**20 and host["PidsLimit"] == 256
    assert not info["Config"]["User"].startswith("0")
    assert info["Config"]["Labels"]["gspo-sandbox.owner"].endswith(f":{os.getpid()}")
    assert info["Config"]["Cmd"][:3] == ["server.app:app", "--uds", "/run/openenv/server.sock"]
    # closed: no container, no socket dir
    assert openenv_containers() == [] and not os.path.exists(sock_dir)


def test_a_missing_image_is_an_infra_error_naming_it():
    env = OpenEnvEnv(image="gspo-no-such-image:0")
    with pytest.raises(InfraError, match="gspo-no-such-image:0"):
        asyncio.run(env.areset(options={"task": {"id": "t", "seed": 0}}))


@pytest.mark.slow  # a container start that fails: about 10-40 s on a loaded 2-core machine
def test_a_server_that_does_not_start_is_an_infra_error_with_its_logs(image):
    env = OpenEnvEnv(image=image, app="server.nope:app", server_start_timeout_s=START_S)
    with pytest.raises(InfraError) as caught:
        asyncio.run(env.areset(options={"task": {"id": "t", "seed": 0}}))
    message = str(caught.value)
    assert image in message and "server.nope:app" in message
    assert 'Could not import module "server.nope"' in message  # the container's own log
    assert openenv_containers() == [] and container._servers == {}


ORPHAN = """
import sys, time
from envs.openenv.container import ServerSpec, shared_server
server = shared_server(ServerSpec(sys.argv[1], start_timeout_s=float(sys.argv[2])))
print(server.name, server.socket_path, flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # a server start in a child process: 10-40 s on a loaded 2-core machine
def test_a_killed_trainers_server_is_reaped_at_the_next_start(image):
    from sandbox.isolation.backends.docker import DockerBackend

    child = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, image, str(START_S)], stdout=subprocess.PIPE, text=True,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        name, sock = child.stdout.readline().split()
    finally:
        child.kill()  # SIGKILL: no atexit, no cleanup of its own
        child.wait()
    assert inspect(name)["State"]["Running"] and os.path.exists(sock)
    DockerBackend(1, image_tag=image, cgroups=False).check()  # what every start does first
    gone = subprocess.run(["docker", "inspect", name], capture_output=True, timeout=30)
    assert gone.returncode != 0 and not os.path.exists(os.path.dirname(os.path.dirname(sock)))


@pytest.mark.slow  # a real (tiny) training run, minutes on 2 cores
def test_train_two_steps_on_an_openenv_image(image, tmp_path):
    run_dir = tmp_path / "run"
    readme = (ROOT / "README.md").read_text()
    start = "python -m gspo_agents.train env=openenv env.kwargs.image="
    line = next(x for x in readme.splitlines() if x.startswith(start))
    line = line.replace("my-openenv-env:latest", image)
    assert image in line
    cmd = [
        sys.executable, *line.split()[1:],
        "trainer.steps=2", "trainer.tasks_per_step=2", "rollout.num_samples_per_task=2",
        "algorithm.filter_zero_spread_groups=false", "logger.wandb_mode=disabled",
        f"trainer.run_dir={run_dir}",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["num_trajectories"] == 4 for r in rows)
    left = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"name=gspo-openenv-{proc.pid}-"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert left.stdout.strip() == ""  # the trainer removed its server at shutdown
