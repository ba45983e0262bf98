"""The `remote` backend from the training side, against real services on loopback.

A tool env in a `sandbox=remote` run opens its sessions on the run's services (the wiring in
gspo_agents/components.py); creating a remote sandbox inside a running event loop never blocks
the loop, and still fails clearly when no URL answers. Real `python -m sandbox serve` processes (bubblewrap), real HTTP.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from fleet_util import TOKEN, compose_run, free_port, start_service

import sandbox
from gspo_agents.components import build_env_factory, build_sandbox
from gspo_agents.config import ConfigError
from sandbox import SandboxUnavailable
from sandbox.sessions.api import SessionLimits


def tool_call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def live_sessions(service) -> int:
    return int(service.capacity()["sessions"]["live"])


def test_a_tool_env_in_a_sandbox_remote_run_opens_its_sessions_on_the_service(
    monkeypatch, capsys
) -> None:
    service = start_service()
    try:
        monkeypatch.setenv("GSPO_SANDBOX_TOKEN", TOKEN)
        # the env group asks for bubblewrap sessions; sandbox=remote moves them to the service
        cfg = compose_run("env=mathtool-v1", "sandbox=remote", f"sandbox.urls=[{service.url}]")
        assert cfg.env.kwargs.backend == "bubblewrap"
        env = build_env_factory(cfg, build_sandbox(cfg, cfg.env.name))()
        assert "sessions run on sandbox.urls" in capsys.readouterr().err
        assert env.session.backend == "remote"
        assert live_sessions(service) == 0

        async def episode() -> tuple[int, str, int]:
            task = {"id": "t", "question": "What is 6 * 7?", "answer": "42"}
            try:
                await env.areset(options={"task": task})
                during = await asyncio.to_thread(live_sessions, service)
                obs, *_ = await env.astep(tool_call("python", code="print(6 * 7)"))
            finally:
                await env.aclose()
                await sandbox.close_sessions()
            return during, obs[0]["content"], await asyncio.to_thread(live_sessions, service)

        during, output, after = asyncio.run(episode())
        assert during == 1  # the episode's session lives on the service
        assert output.strip() == "42" and env.session.ws is None
        assert after == 0
    finally:
        service.stop()


def test_sandbox_remote_fails_the_run_at_once_when_no_service_answers(monkeypatch) -> None:
    monkeypatch.setenv("GSPO_SANDBOX_TOKEN", TOKEN)
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = compose_run("env=codeagent", "sandbox=remote", f"sandbox.urls=[{dead}]")
    with pytest.raises(SandboxUnavailable, match=f"{dead}: unreachable"):
        build_env_factory(cfg, None)
    monkeypatch.setenv("GSPO_SANDBOX_TOKEN", "short")
    with pytest.raises(ValueError, match="at least 16"):
        build_env_factory(cfg, None)


async def test_creating_a_remote_session_in_the_loop_never_blocks_it() -> None:
    """A 'service' that accepts connections and never answers: the loop must keep running (its
    own accept handler runs) while the probe waits on it; when it hangs up, and the other URL
    refuses connections, opening the session fails naming both."""
    connected = asyncio.Event()
    peers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer)
        connected.set()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    hanging = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    refusing = f"http://127.0.0.1:{free_port()}"

    async def open_one() -> None:
        options = {"urls": [hanging, refusing], "token": TOKEN}
        async with sandbox.session(SessionLimits(), backend="remote", **options):
            raise AssertionError("no service answered, yet a session opened")

    opening = asyncio.create_task(open_one())
    try:
        await connected.wait()  # runs only if the loop is free while the probe is in flight
        assert not opening.done(), "the probe finished before the loop ran: it blocked the loop"
        for peer in peers:
            peer.close()  # hang up without an answer
        with pytest.raises(SandboxUnavailable, match="no sandbox service answers") as caught:
            await opening
        assert f"{hanging}: unreachable" in str(caught.value)
        assert f"{refusing}: unreachable" in str(caught.value)
    finally:
        opening.cancel()
        server.close()
        await sandbox.close_sessions()


def test_sandbox_docker_hosts_is_only_for_the_docker_backend() -> None:
    """(The training config's docker_hosts on two real engines: test_fleet_docker_hosts.py.)"""
    assert list(compose_run("sandbox.docker_hosts=[ssh://a]").sandbox.docker_hosts) == ["ssh://a"]
    with pytest.raises(ConfigError, match="docker_hosts.*is for sandbox=docker"):
        compose_run("sandbox=bubblewrap", "sandbox.docker_hosts=[ssh://a]")
