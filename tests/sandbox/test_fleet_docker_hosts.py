"""`docker_hosts` with two real Docker engines: the machine's own and a second `dockerd` this
module starts, with its own socket, data root, exec root (and so its own containerd), no bridge
and no iptables. The sandbox image is copied into it with `docker save | docker -H ... load`.
Runs and sessions must spread over both engines and give correct results on each.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_util import compose_run, require_tool
from sbtest_util import make_sandbox

from gspo_agents.components import build_sandbox
from sandbox import Program, SessionPool, TestCase, Verdict
from sandbox.isolation import image
from sandbox.isolation.backends.docker import LABEL

FIRST = "unix:///var/run/docker.sock"
AB_PY = "a, b = map(int, input().split())\nprint(a + b)\n"
AB_CPP = '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n'


@pytest.fixture(scope="module")
def second_engine() -> Iterator[str]:
    dockerd = require_tool("dockerd")
    make_sandbox("docker")  # fail (CI) / skip if the first engine or its image is missing
    root = Path(tempfile.mkdtemp(prefix="gspo-docker2-", dir="/var/tmp"))
    run_dir = Path(tempfile.mkdtemp(prefix="gspo-docker2-", dir="/run"))
    host = f"unix://{run_dir}/docker.sock"
    log = open(root / "dockerd.log", "w")  # noqa: SIM115 - open for the engine's lifetime
    proc = subprocess.Popen(
        [dockerd, "--host", host, "--data-root", str(root / "data"),
         "--exec-root", str(run_dir / "exec"), "--pidfile", str(run_dir / "docker.pid"),
         "--bridge", "none", "--iptables=false", "--ip6tables=false"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _docker(host, "info").returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"second dockerd did not start: {(root / 'dockerd.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)
        save = subprocess.Popen(["docker", "save", image.image_tag()], stdout=subprocess.PIPE)
        loaded = subprocess.run(
            ["docker", "-H", host, "load"], stdin=save.stdout, capture_output=True
        )
        assert save.wait() == 0 and loaded.returncode == 0, loaded.stderr
        yield host
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)


def _docker(host: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "-H", host, *argv], capture_output=True, text=True, timeout=120
    )


def _ours(host: str, owner: str) -> list[str]:
    return _docker(host, "ps", "-q", "--filter", f"label={LABEL}={owner}").stdout.split()


async def test_runs_spread_over_two_docker_engines(second_engine: str) -> None:
    # built as a training run builds it: sandbox=docker sandbox.docker_hosts=[...]
    hosts = f"sandbox.docker_hosts=['{FIRST}','{second_engine}']"
    cfg = compose_run("env=mathtool", "sandbox=docker", "sandbox.max_concurrency=4", hosts)
    sb = build_sandbox(cfg, cfg.env.name)
    assert sb._backend.hosts == [FIRST, second_engine]  # type: ignore[attr-defined]
    try:
        programs = [Program("python", AB_PY), Program("cpp", AB_CPP)] * 4
        results = await asyncio.gather(
            *(
                sb.run(p, [TestCase(f"{i} 5", str(i + 5)), TestCase("1 1", "2")])
                for i, p in enumerate(programs)
            )
        )
        owner = sb._backend.owner  # type: ignore[attr-defined]
        on_first, on_second = _ours(FIRST, owner), _ours(second_engine, owner)
    finally:
        await sb.aclose()
    assert [r.verdict for r in results] == [Verdict.OK] * 8
    assert on_first and on_second  # warm containers on both engines
    assert _ours(FIRST, owner) == [] and _ours(second_engine, owner) == []


async def test_sessions_spread_over_two_docker_engines(second_engine: str) -> None:
    make_sandbox("docker")
    pool = SessionPool("docker", max_sessions=2, hosts=[FIRST, second_engine])
    try:
        async with pool.session() as a, pool.session() as b:
            hosts = {h.host for h in pool._live.values()}
            await a.exec("export W=first")
            await b.exec("export W=second")
            assert (await a.exec("echo $W")).stdout == "first\n"
            assert (await b.exec("echo $W")).stdout == "second\n"
    finally:
        await pool.aclose()
    assert hosts == {FIRST, second_engine}
