"""An MCP stdio server run inside an episode's sandbox session: an `mcp` client transport.

    ws = await session.open(SessionLimits(...))              # envs.tools.session.EpisodeSession
    tools = McpTools(session_stdio(ws, "python3 server.py"), name="math server", mode=MODERN)
    listed = await tools.open()                              # list_tools, inside the sandbox
    text = await tools.call("add", a=1, b=2)                 # call_tool, inside the sandbox

Sessions run no process past the call that started it (sandbox/sessions/api.py: that is how a
call's CPU and memory are accounted for and limited), so the server is not one long-lived
process: each request is one session `exec` that starts the server with the request on its stdin,
keeps the stdin open until the server has written the response with that request's id, then
closes it (the server exits at EOF). That needs MCP's stateless protocol (2026-07-28, the `mcp`
2.x SDK: every request carries its protocol version and capabilities, no handshake), so the
client is pinned to it (`mode=MODERN`: no discovery probe, which a slow server start would time
out into the legacy handshake, whose state a per-request server cannot keep); state a
server keeps between calls must live in the session's files, like any program's there. Every
call runs under the session's isolation, per-call limits and budget. Notifications from the
client (e.g. cancellation) are not forwarded.

A server that exits without answering, or a session that fails, gives the request a JSON-RPC
error, which McpTools reports as InfraError: never a reward of 0. A tool call stopped by the
session's per-call limits (wall or CPU time, memory, the output cap) is the model's doing (its
arguments made the tool do that): a failed call, shown to it. A listing that hits them is infra.
"""

from __future__ import annotations

import functools
import json
import secrets
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["MODERN", "session_stdio"]

MODERN = "2026-07-28"  # the stateless MCP version (mcp_types.version.MODERN_PROTOCOL_VERSIONS)

# The server reads the request from a fifo that stays open until the server has answered it (or
# died); then EOF lets it exit.
_WAIT = (
    "mkfifo {fifo} || exit 70\n( {command} ) < {fifo} > {out} & pid=$!\n"
    "{{ cat {req}; while kill -0 $pid 2>/dev/null && ! grep -Eq '\"id\": ?{rid}[,}}]' {out}"
    " 2>/dev/null; do sleep 0.02; done; }} > {fifo}\n"
    "wait $pid; code=$?; cat {out} 2>/dev/null; rm -f {req} {out} {fifo}; exit $code"
)


@asynccontextmanager
async def session_stdio(
    ws: Any, command: str, *, timeout_s: float = 30.0, cwd: str | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) streams of an MCP transport whose server is `command`, run with bash
    in the session `ws` (a sandbox Workspace) once per request."""
    import anyio
    from mcp.shared.message import SessionMessage

    to_client, read_stream = anyio.create_memory_object_stream[Any](16)
    write_stream, from_client = anyio.create_memory_object_stream[SessionMessage](16)
    full = f"cd {shlex.quote(cwd)} && {command}" if cwd else command

    async def pump() -> None:
        async with to_client, from_client:
            async for message in from_client:
                payload = message.message.model_dump(by_alias=True, exclude_unset=True)
                if "id" not in payload or "method" not in payload:
                    continue  # a notification or a response: nothing to run
                for reply in await _exchange(ws, full, payload, timeout_s):
                    await to_client.send(reply)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        try:
            yield read_stream, write_stream
        finally:
            tg.cancel_scope.cancel()


async def _exchange(ws: Any, command: str, request: dict, timeout_s: float) -> list[Any]:
    """Run the server for one request; its stdout's JSON-RPC messages (an error response when
    it gave none for the request)."""
    from mcp.shared.message import SessionMessage

    rid = request["id"]
    if not isinstance(rid, int):  # the client's ids are ints; anything else cannot be grepped
        return [_error(rid, f"unsupported request id {rid!r}")]
    tag = secrets.token_hex(6)
    req, out, fifo = (f"/tmp/mcp-{tag}.{kind}" for kind in ("req", "out", "fifo"))
    try:
        await ws.write_file(req, json.dumps(request) + "\n")
        result = await ws.exec(
            _WAIT.format(req=req, out=out, fifo=fifo, rid=rid, command=command), timeout_s=timeout_s
        )
    except Exception as exc:  # noqa: BLE001 - the session broke: the request fails, as infra
        return [_error(rid, f"the sandbox session failed: {type(exc).__name__}: {exc}")]
    replies, answered = [], False
    for line in result.stdout.splitlines():
        try:
            message = _adapter().validate_json(line)
        except ValueError:
            continue  # the server's own prints are not protocol
        answered = answered or getattr(message, "id", None) == rid
        replies.append(SessionMessage(message))
    if answered:
        return replies
    if request.get("method") == "tools/call" and (
        result.timed_out or result.oom_killed or result.stdout_cut
    ):
        # What the call's arguments made the tool do (run past the limits, flood its output)
        # is the model's: a failed call it is shown, not an infrastructure error.
        why = result.message or (
            "its output passed the session's cap" if result.stdout_cut else "killed"
        )
        return [*replies, _tool_failed(rid, f"the tool call was stopped: {why}")]
    why = "timed out" if result.timed_out else f"exited with code {result.exit_code}"
    replies.append(_error(rid, f"the MCP server {why} without answering: {result.stderr[-500:]}"))
    return replies


def _error(rid: Any, message: str) -> Any:
    from mcp.shared.message import SessionMessage

    payload = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": message}}
    return SessionMessage(_adapter().validate_python(payload))


def _tool_failed(rid: int, message: str) -> Any:
    from mcp.shared.message import SessionMessage

    result = {
        "content": [{"type": "text", "text": message}],
        "isError": True,
        "resultType": "complete",
    }
    return SessionMessage(
        _adapter().validate_python({"jsonrpc": "2.0", "id": rid, "result": result})
    )


@functools.cache
def _adapter() -> Any:
    from mcp.types import JSONRPCMessage
    from pydantic import TypeAdapter

    return TypeAdapter(JSONRPCMessage)
