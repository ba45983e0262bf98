"""The OpenAI-compatible endpoint inside a sandbox session, for an agent loop that runs there.

Sandbox sessions have no network. `episode_socket_dir(endpoint, session_id)` serves the
endpoint (openai_endpoint.py) on a unix socket in a fresh host directory, for one episode: every
request that arrives on it is recorded under that episode's session id, whatever `X-Session-Id`
the caller sends (the header is replaced, not trusted), so code in the session cannot write into
another episode's trajectory. The directory also holds `gspo_openai.py`, a standard-library
client of that socket. `sandbox.session(..., socket_dir=DIR)` binds the directory read-only at
/gspo-host and gives it to the session's uid alone (sandbox/sessions/backends/base.py); nothing
else of the host becomes reachable, and the session keeps its empty network namespace.

Inside the session:

    import sys; sys.path.insert(0, "/gspo-host")
    import gspo_openai
    reply = gspo_openai.chat([{"role": "user", "content": "hi"}], max_tokens=16)
    reply["choices"][0]["message"]  # the OpenAI response as JSON, with the engine's token ids

or `base_url = gspo_openai.local_base_url()` for a scaffold that wants an HTTP URL (the `openai`
package, where the image has it): a forwarder thread on the session's own loopback.

It protects the trajectories of other episodes and the host (one socket, one episode, no
network; a request body is capped at MAX_BODY_BYTES and at most MAX_CONCURRENT requests are in
flight, so hostile code cannot fill the trainer's memory through it). It does not limit how many
calls the episode makes: that is the episode's `rollout.trajectory_timeout_s` and the session's
CPU and wall budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gspo_agents.rollout.openai_endpoint import SESSION_HEADER, OpenAIEndpoint, build_app

__all__ = ["SHIM_NAME", "SOCKET_NAME", "episode_socket_dir", "pinned_to_session"]

SOCKET_NAME = "endpoint.sock"
SHIM_NAME = "gspo_openai.py"
SHIM_SOURCE = (Path(__file__).with_name("session_shim.py")).read_text()
DIR_PREFIX = "gspo-endpoint-"  # + the owner's pid + "-": a dead owner's dirs are removed
MAX_BODY_BYTES = 8 << 20  # one request's body (a long history is well under it)
MAX_CONCURRENT = 4  # requests in flight on one episode's socket (more: 503); its turns are serial


def pinned_to_session(app: Any, session_id: str, max_body_bytes: int = MAX_BODY_BYTES) -> Any:
    """An ASGI app that serves `app` with the session header set to `session_id` on every
    request (any header of that name the client sent is dropped), and refuses a request body
    over `max_body_bytes` (413): the caller may be hostile code, and the body is read into the
    trainer's memory."""
    name = SESSION_HEADER.lower().encode()
    value = session_id.encode()

    async def pinned(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != name]
        declared = [v for k, v in headers if k.lower() == b"content-length"]
        if any(not v.isdigit() or int(v) > max_body_bytes for v in declared):
            return await _too_large(send, max_body_bytes)
        seen = 0

        async def capped() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > max_body_bytes:  # a chunked body past the cap: the handler answers 400
                raise ValueError(f"the request body is over {max_body_bytes} bytes")
            return message

        await app({**scope, "headers": [*headers, (name, value)]}, capped, send)

    return pinned


def reap_stale_dirs() -> None:
    """Remove the socket dirs of trainers that died without removing them (SIGKILL)."""
    from sandbox.isolation.cgroups import pid_alive

    for path in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = path.name[len(DIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)


async def _too_large(send: Any, limit: int) -> None:
    body = json.dumps({"error": {"message": f"request body over {limit} bytes"}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def episode_socket_dir(endpoint: OpenAIEndpoint, session_id: str) -> AsyncIterator[str]:
    """A fresh host directory with the endpoint's socket pinned to `session_id` and the shim;
    served in this event loop until the block ends, then removed."""
    import uvicorn

    reap_stale_dirs()
    root = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    task = None
    try:
        sock.bind(os.path.join(root, SOCKET_NAME))
        shim = SHIM_SOURCE.replace("MODEL = None", f"MODEL = {endpoint.model_name!r}", 1)
        Path(root, SHIM_NAME).write_text(shim)
        app = pinned_to_session(build_app(endpoint), session_id)
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", limit_concurrency=MAX_CONCURRENT
        )
        server = uvicorn.Server(config)
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        yield root
    finally:
        if task is not None:
            server.should_exit = True
            await asyncio.shield(task)
        sock.close()
        with contextlib.suppress(OSError):
            os.chmod(root, 0o700)  # the session was given it read-only (share_socket_dir)
        shutil.rmtree(root, ignore_errors=True)
