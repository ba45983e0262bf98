"""An agent loop inside a sandbox session (docker and bubblewrap; CI=true fails without them):
the session has no network, and the trainer's endpoint reaches it as one unix socket pinned to
the episode (gspo_agents/rollout/session_endpoint.py). A scripted python program in the session
makes two chat calls with the stdlib shim; the episode's trajectory is the engine's own ids and
log-probs; a forged session header still lands in the caller's own episode; the host's TCP
endpoint is unreachable; nothing of the socket directory survives."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from test_manager_support import tiny_model_dir, tiny_tokenizer

from gspo_agents.rollout.agent import AgentManager
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.records import RolloutConfig
from gspo_agents.trajectory import Status

sys.path.insert(0, str(Path(__file__).resolve().parent / "sandbox"))
from session_util import SESSION_BACKENDS, started_pool  # noqa: E402

# Runs in the session (its python3, standard library only). argv: the host endpoint's TCP port.
PROGRAM = r"""
import http.client, json, socket, sys
sys.path.insert(0, "/gspo-host")
import gspo_openai

out = {}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    out["host_tcp"] = "reached"
except OSError as exc:
    out["host_tcp"] = type(exc).__name__
messages = [{"role": "user", "content": "Say a number."}]
first = gspo_openai.chat(messages, max_tokens=5)
messages += [first["choices"][0]["message"], {"role": "user", "content": "Another."}]
# the second call claims another episode's session id: it must land in this one
conn = gspo_openai._UnixConnection()
body = json.dumps({"model": gspo_openai.MODEL, "messages": messages, "max_tokens": 5})
conn.request("POST", "/v1/chat/completions", body=body,
             headers={"Content-Type": "application/json", "X-Session-Id": "victim"})
second = json.loads(conn.getresponse().read())
out["replies"] = [first, second]
import urllib.request  # an HTTP URL on the session's own loopback, forwarded to the socket
with urllib.request.urlopen(gspo_openai.local_base_url() + "/models", timeout=30) as r:
    out["models"] = json.loads(r.read())["data"][0]["id"]
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", SESSION_BACKENDS)
async def test_an_agent_in_a_sandbox_session_yields_the_engines_trajectory(backend):
    check = await started_pool(backend, max_sessions=1)  # fails under CI=true without it
    await check.aclose()
    engine = LocalEngine(tiny_model_dir(), max_batch_size=4, seed=0)
    generated: list[tuple[list[int], list[int], list[float]]] = []
    generate = engine.generate

    async def spy(input_ids, *args, **kwargs):  # what the engine itself sampled
        gen = await generate(input_ids, *args, **kwargs)
        generated.append((list(input_ids), list(gen.token_ids), list(gen.logprobs)))
        return gen

    engine.generate = spy
    ran: dict = {}
    made: set[str] = set()

    async def agent(ctx):
        async with ctx.session(backend=backend) as ws:
            ran["dir"] = (await ws.exec("ls -A /gspo-host")).stdout.split()
            made.update(_socket_dirs() - before)
            await ws.write_file("agent.py", PROGRAM)
            port = ctx.base_url.rsplit(":", 1)[1].split("/")[0]
            result = await ws.exec(f"python3 agent.py {port}", timeout_s=120)
        assert result.ok, result.render()
        ran.update(json.loads(result.stdout))
        return 1.0

    before = _socket_dirs()
    cfg = RolloutConfig(num_samples_per_task=2, max_new_tokens_per_turn=5)
    manager = AgentManager(engine, tiny_tokenizer(), agent, cfg)
    try:
        result = await manager.collect([{"id": "sandboxed"}])
        leaked = dict(manager.endpoint.sessions)
    finally:
        await manager.aclose()
        await engine.close()
    (group,) = result.groups
    assert ran["dir"] == ["endpoint.sock", "gspo_openai.py"]
    assert _socket_dirs() == before  # each episode's socket dir went with it
    assert len(made) == 2 and not any(os.path.exists(d) for d in made)
    assert ran["host_tcp"] in ("ConnectionRefusedError", "OSError", "TimeoutError")
    assert leaked == {}  # no call was recorded under "victim" (or any other id)
    assert ran["models"] == "policy"  # through gspo_openai.local_base_url()'s forwarder
    assert len(group) == 2 and all(t.status == Status.COMPLETE for t in group), [
        t.error for t in group
    ]
    assert len(generated) == 4  # two calls in each of the two episodes
    for traj in group:
        assert traj.info["prefix_breaks"] == 0
        assert [s.kind for s in traj.segments] == ["model", "env", "model"]
        first, env, second = traj.segments
        assert (traj.prompt_ids, first.token_ids, first.logprobs) in generated
        context = [*traj.prompt_ids, *first.token_ids, *env.token_ids]  # the second call's ids
        assert (context, second.token_ids, second.logprobs) in generated
    replies = ran["replies"]  # what the program saw is what the engine made (the last episode)
    assert [r["choices"][0]["token_ids"] for r in replies] in [
        [t.segments[0].token_ids, t.segments[2].token_ids] for t in group
    ]


def _socket_dirs() -> set[str]:
    import tempfile

    return {str(p) for p in Path(tempfile.gettempdir()).glob(f"gspo-endpoint-{os.getpid()}-*")}


async def test_the_pinned_socket_app_replaces_the_header_and_caps_the_body():
    """What the session's socket serves: the episode's id whatever the caller claims, and no
    body past the cap (declared or streamed) reaches the endpoint."""
    import httpx

    from gspo_agents.rollout.session_endpoint import pinned_to_session

    seen: list = []

    async def app(scope, receive, send):
        body = b""
        try:
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
        except ValueError as exc:
            body = str(exc).encode()
        seen.append((dict(scope["headers"]).get(b"x-session-id"), body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    transport = httpx.ASGITransport(app=pinned_to_session(app, "episode-7", max_body_bytes=64))
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        ok = await client.post("/v1/models", content=b"{}", headers={"X-Session-Id": "victim"})
        big = await client.post("/v1/models", content=b"x" * 65)

        async def chunks():
            for _ in range(3):
                yield b"y" * 30

        streamed = await client.post("/v1/models", content=chunks())
    assert ok.status_code == 200 and seen[0] == (b"episode-7", b"{}")
    assert big.status_code == 413 and len(seen) == 2  # never reached the endpoint
    assert seen[1] == (b"episode-7", b"the request body is over 64 bytes")
    assert streamed.status_code == 200  # the app saw the error, not the bytes past the cap


def test_a_dead_trainers_socket_dirs_are_reaped(tmp_path, monkeypatch):
    import tempfile

    from gspo_agents.rollout.session_endpoint import reap_stale_dirs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = _finished_pid()
    stale, ours = (
        tmp_path / f"gspo-endpoint-{dead}-x1",
        tmp_path / f"gspo-endpoint-{os.getpid()}-x2",
    )
    for d in (stale, ours):
        d.mkdir()
        (d / "gspo_openai.py").write_text("")
        d.chmod(0o500)
    reap_stale_dirs()
    assert not stale.exists() and ours.exists()


def _finished_pid() -> int:
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# The real `openai` package inside the session, over the forwarder (the image has no openai:
# its files are uploaded, as a scaffold's own image or files would bring them).
OPENAI_PROGRAM = r"""
import json, sys
sys.path[:0] = ["/workspace/site", "/gspo-host"]
import gspo_openai, openai

client = openai.OpenAI(base_url=gspo_openai.local_base_url(), api_key="-", max_retries=0)
messages, ids = [{"role": "user", "content": "Say a number."}], []
for _ in range(2):
    reply = client.chat.completions.create(model=gspo_openai.MODEL, messages=messages, max_tokens=5)
    messages.append(reply.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "user", "content": "Another."})
    ids.append(reply.choices[0].model_extra["token_ids"])
print(json.dumps(ids))
"""


LOADS_OPENAI = """
import openai
client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="-", max_retries=0)
try:  # a call to a closed port: the request path's lazy imports (httpcore, h11, ...) load
    client.chat.completions.create(model="m", messages=[])
except openai.APIConnectionError:
    pass
"""


@pytest.mark.slow  # uploads the openai package and its dependencies (~30 MB) into the session
@pytest.mark.parametrize("backend", SESSION_BACKENDS)
async def test_the_openai_package_inside_a_session_trains_the_engines_ids(backend, tmp_path):
    from site_packages import copy_imported_packages

    check = await started_pool(backend, max_sessions=1)
    await check.aclose()
    site = copy_imported_packages(LOADS_OPENAI, tmp_path / "site")
    engine = LocalEngine(tiny_model_dir(), max_batch_size=4, seed=0)
    seen: list = []

    async def agent(ctx):
        async with ctx.session(backend=backend) as ws:
            await ws.upload(site, "site")
            await ws.write_file("agent.py", OPENAI_PROGRAM)
            result = await ws.exec("python3 agent.py", timeout_s=300)
        assert result.ok, result.render()
        seen.append(json.loads(result.stdout))
        return float(len(seen))

    cfg = RolloutConfig(num_samples_per_task=2, max_new_tokens_per_turn=5)
    manager = AgentManager(engine, tiny_tokenizer(), agent, cfg)
    try:
        (group,) = (await manager.collect([{"id": "openai-inside"}])).groups
    finally:
        await manager.aclose()
        await engine.close()
    assert all(t.status == Status.COMPLETE for t in group), [t.error for t in group]
    assert sorted(t.reward for t in group) == [1.0, 2.0]
    for traj in group:
        assert [s.kind for s in traj.segments] == ["model", "env", "model"]
        assert [traj.segments[0].token_ids, traj.segments[2].token_ids] in seen
