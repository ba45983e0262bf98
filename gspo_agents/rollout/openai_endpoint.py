"""An OpenAI-compatible endpoint in front of a training engine that records token-in/token-out
trajectories of the agents that call it.

`/v1/chat/completions`, `/v1/completions` and `/v1/models`, served by Starlette on any `Engine`
(LocalEngine, SGLangEngine). A chat call's messages are rendered with the model's chat template
(`ChatFormat`), the engine continues the ids, and the answer carries, besides the standard
`choices[].message` (tool calls parsed with envs/tools/parsers.py into OpenAI `tool_calls`) and
`choices[].logprobs.content[].logprob`, the engine's own ids: `prompt_token_ids` (top level and per
choice, vLLM's `return_token_ids` shape), `choices[].token_ids` and `choices[].completion_logprobs`.

Recording: every call carrying the `X-Session-Id` header is appended to that session's
trajectory (a `/v1/completions` call with token ids: those ids, extending or breaking as below). When the history a call sends is the previous call's history plus the assistant
message this endpoint returned plus new messages, only the new messages are rendered and appended
after the engine's own tokens (`ChatFormat.observation_ids`): the model's ids are never decoded
and re-encoded. Otherwise the whole history is rendered; if those ids do not start with the
previous call's prompt + completion, the turn starts a new trajectory of the session (counted in
`rollout/prefix_breaks`), so no sequence the learner sees mixes two renderings.

It is not an authenticating or multi-tenant server: it binds to localhost for agents the trainer
runs. It knows nothing of the learner.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from envs.tools.parsers import ToolCall, get_parser, resolve_tool_format, run_parser
from gspo_agents.rollout.chat import ChatFormat, strip_past_reasoning
from gspo_agents.rollout.engine import Engine, EngineError, Generation, SamplingParams
from gspo_agents.trajectory import Trajectory

__all__ = ["OpenAIEndpoint", "Session", "SESSION_HEADER", "serve_endpoint"]

SESSION_HEADER = "X-Session-Id"
PAST_REASONING = ("keep", "strip")


@dataclass(slots=True)
class Session:
    """One agent episode's calls: its trajectories (more than one after a prefix break)."""

    session_id: str
    trajectories: list[Trajectory] = field(default_factory=list)
    prefix_breaks: int = 0
    calls: int = 0
    # The previous call: the messages it was given plus the assistant message returned, and the
    # ids the engine continued from plus what it sampled.
    last_messages: list[dict] = field(default_factory=list)
    last_ids: list[int] = field(default_factory=list)
    last_completion: list[int] = field(default_factory=list)
    # One call of a session at a time, so turns are recorded in the order they were made.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)


class RequestError(ValueError):
    """A malformed request: answered 400 with the message."""


class OpenAIEndpoint:
    """The endpoint's state: the engine, the chat format and the recorded sessions."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        *,
        model_name: str = "policy",
        max_new_tokens: int = 256,
        max_context_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        past_reasoning: str = "keep",
        tool_format: str = "auto",
    ) -> None:
        if past_reasoning not in PAST_REASONING:
            raise ValueError(
                f"past_reasoning={past_reasoning!r} is not one of {list(PAST_REASONING)}"
            )
        self.engine = engine
        self.chat = ChatFormat(tokenizer)
        self.model_name = model_name
        self.max_new_tokens = max_new_tokens
        self.max_context_tokens = max_context_tokens
        # The trainer's sampling, not the request's: the learner computes log-probs at this
        # temperature, so a client's own temperature / top_p would bias every ratio.
        self.sampling = SamplingParams(1, temperature, top_p, top_k, self.chat.stop_token_ids)
        self.past_reasoning = past_reasoning
        fmt = resolve_tool_format(tool_format, getattr(tokenizer, "chat_template", None))
        self.parser = get_parser(fmt)
        self.sessions: dict[str, Session] = {}
        self._ids = itertools.count()

    # -- sessions -------------------------------------------------------------------------------
    def session(self, session_id: str) -> Session:
        return self.sessions.setdefault(session_id, Session(session_id))

    def pop_session(self, session_id: str) -> Session:
        """The session's record, removed; a session that made no call has no trajectory."""
        return self.sessions.pop(session_id, None) or Session(session_id)

    def metrics(self) -> dict[str, float]:
        return {
            "rollout/prefix_breaks": float(sum(s.prefix_breaks for s in self.sessions.values()))
        }

    # -- rendering ------------------------------------------------------------------------------
    def _render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The whole history through the template. Tool results are program output, untrusted
        as on the env path: a special-token string in one stays text (ChatFormat._defuse)."""
        if self.past_reasoning == "strip":
            messages = strip_past_reasoning(messages)
        safe = [
            {
                **m,
                "content": self.chat._defuse(m.get("content") or "")
                if m.get("role") == "tool"
                else m.get("content") or "",
            }
            for m in messages
        ]
        return self.chat.prompt_ids(safe, tools=tools)

    def prompt_for(
        self, session: Session | None, messages: list[dict], tools: list[dict] | None
    ) -> tuple[list[int], Trajectory | None, list[int]]:
        """(ids to continue, the trajectory the turn extends or None for a new one, the env ids
        the turn appends to it)."""
        if session is None or not session.trajectories:
            return self._render(messages, tools), None, []
        traj = session.trajectories[-1]
        known = len(session.last_messages)
        new = messages[known:]
        extends = (
            0 < known < len(messages)
            and [_norm(m) for m in messages[:known]] == [_norm(m) for m in session.last_messages]
            and not (self.past_reasoning == "strip" and self._reasoning_before_user(traj, new))
        )
        if extends:
            env_ids = self.chat.observation_ids(new, session.last_completion)
            return session.last_ids + session.last_completion + env_ids, traj, env_ids
        return self.continuing(session, self._render(messages, tools))

    def continuing(
        self, session: Session, ids: list[int]
    ) -> tuple[list[int], Trajectory | None, list[int]]:
        """`ids` extend the session's last prompt + completion, or they start a new trajectory
        (a prefix break, counted when the turn is recorded: a refused call breaks nothing)."""
        if not session.trajectories:
            return ids, None, []
        before = session.last_ids + session.last_completion
        if ids[: len(before)] == before:
            return ids, session.trajectories[-1], ids[len(before) :]
        return ids, None, []  # a break: record() counts it once the turn is made

    def _reasoning_before_user(self, traj: Trajectory, new: list[dict]) -> bool:
        """Would Qwen3's rule (strip reasoning before the last user message) rewrite the
        history? Read from what the model generated, not from the content returned (a reply
        with tool calls returns its reasoning apart)."""
        if not any(m.get("role") == "user" for m in new):
            return False
        return any(
            "</think>" in self.chat.action_text(s.token_ids)
            for s in traj.segments
            if s.kind == "model"
        )

    # -- generation -----------------------------------------------------------------------------
    async def complete(
        self, session_id: str | None, ids: list[int], body: dict, rid: str
    ) -> Generation:
        asked = body.get("max_completion_tokens") or body.get("max_tokens") or self.max_new_tokens
        budget = min(int(asked), self.max_new_tokens)  # rollout.max_new_tokens_per_turn caps it
        if self.max_context_tokens is not None:
            room = self.max_context_tokens - len(ids)
            if room < 1:
                raise RequestError(
                    f"the prompt is {len(ids)} tokens, the context budget "
                    f"(rollout.max_context_tokens) is {self.max_context_tokens}: shorten the "
                    "history or raise the budget"
                )
            budget = min(budget, room)
        seed = body.get("seed")
        sampling = dataclasses.replace(
            self.sampling, max_new_tokens=budget, seed=None if seed is None else int(seed)
        )
        return await self.engine.generate(ids, sampling, rid, route_key=session_id)

    def record(
        self,
        session: Session,
        traj: Trajectory | None,
        ids: list[int],
        env_ids: list[int],
        gen: Generation,
        messages: list[dict],
        reply: dict,
    ) -> None:
        if traj is None:
            session.prefix_breaks += bool(session.trajectories)
            traj = Trajectory(list(ids), task_id=session.session_id)
            session.trajectories.append(traj)
        traj.append_env(env_ids)
        traj.append_model(gen.token_ids, gen.logprobs, gen.weight_version, gen.token_versions)
        traj.close_turn()
        traj.num_turns += 1
        session.calls += 1
        session.last_messages = [*messages, reply] if messages else []  # [] after token in
        session.last_ids, session.last_completion = list(ids), list(gen.token_ids)

    def reply_message(self, gen: Generation, tools: list[dict] | None) -> tuple[dict, str]:
        text = self.chat.action_text(gen.token_ids)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if not tools:
            return message, _finish(gen, False)
        parsed = run_parser(self.parser, text, tools)
        if not parsed.calls:
            return message, _finish(gen, False)
        message["content"] = parsed.content.strip() or None
        if parsed.reasoning:
            message["reasoning_content"] = parsed.reasoning
        message["tool_calls"] = [_openai_call(c) for c in parsed.calls]
        return message, _finish(gen, True)

    def next_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}{next(self._ids):06x}"


def _finish(gen: Generation, called: bool) -> str:
    if gen.finish_reason == "length":
        return "length"
    return "tool_calls" if called else "stop"


def _openai_call(call: ToolCall) -> dict:
    return {
        "id": f"call_{uuid.uuid4().hex[:16]}",
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


def _norm(message: dict) -> tuple:
    """What must match for a message the agent sends back to count as the one seen before."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        args = fn.get("arguments")
        with contextlib.suppress(TypeError, ValueError):
            args = json.loads(args) if isinstance(args, str) else args
        calls.append((fn.get("name"), json.dumps(args, sort_keys=True)))
    return (message.get("role"), message.get("content") or "", tuple(calls))


# -- HTTP ---------------------------------------------------------------------------------------
def _choice_extras(ids: list[int], gen: Generation, chat: ChatFormat) -> dict:
    tok: Any = chat.tokenizer
    content = [
        {"token": tok.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
        for t, lp in zip(gen.token_ids, gen.logprobs)
    ]
    return {
        "logprobs": {"content": content},
        "token_ids": list(gen.token_ids),
        "prompt_token_ids": list(ids),
        "completion_logprobs": list(gen.logprobs),
        "weight_version": gen.weight_version,
    }


async def _body(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError as exc:
        raise RequestError(f"the request body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if int(body.get("n") or 1) != 1:
        raise RequestError("n must be 1: a recorded session is one line of turns")
    if body.get("stream"):
        raise RequestError("stream=true is not supported: call without streaming")
    return body


def build_app(endpoint: OpenAIEndpoint) -> Starlette:
    async def chat_completions(request: Request) -> JSONResponse:
        body = await _body(request)
        messages, tools = body.get("messages"), body.get("tools") or None
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list of chat messages")
        sid = request.headers.get(SESSION_HEADER)
        session = endpoint.session(sid) if sid else None
        async with session.lock if session is not None else contextlib.nullcontext():
            ids, traj, env_ids = endpoint.prompt_for(session, messages, tools)
            rid = endpoint.next_id(sid or "call")
            gen = await endpoint.complete(sid, ids, body, rid)
            reply, finish = endpoint.reply_message(gen, tools)
            if session is not None:
                endpoint.record(session, traj, ids, env_ids, gen, messages, reply)
        choice = {"index": 0, "message": reply, "finish_reason": finish}
        choice.update(_choice_extras(ids, gen, endpoint.chat))
        return _answer(endpoint, rid, "chat.completion", choice, ids, gen)

    async def completions(request: Request) -> JSONResponse:
        body = await _body(request)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            ids = endpoint.chat._encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)  # token in: the ids as given
        else:
            raise RequestError("prompt must be a string or a list of token ids")
        sid = request.headers.get(SESSION_HEADER)
        session = endpoint.session(sid) if sid else None
        async with session.lock if session is not None else contextlib.nullcontext():
            rid = endpoint.next_id(sid or "cmpl")
            if session is not None:  # token in: recorded as given, extending or breaking
                ids, traj, env_ids = endpoint.continuing(session, ids)
            gen = await endpoint.complete(sid, ids, body, rid)
            if session is not None:
                endpoint.record(session, traj, ids, env_ids, gen, [], {})
        text = endpoint.chat.action_text(gen.token_ids)
        extras = _choice_extras(ids, gen, endpoint.chat)
        tokens = [c["token"] for c in extras["logprobs"]["content"]]  # the legacy shape too
        extras["logprobs"].update(tokens=tokens, token_logprobs=list(gen.logprobs))
        choice = {"index": 0, "text": text, "finish_reason": _finish(gen, False), **extras}
        return _answer(endpoint, rid, "text_completion", choice, ids, gen)

    async def models(request: Request) -> JSONResponse:
        model = {"id": endpoint.model_name, "object": "model", "created": 0, "owned_by": "gspo"}
        return JSONResponse({"object": "list", "data": [model]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", _errors(chat_completions), methods=["POST"]),
            Route("/v1/completions", _errors(completions), methods=["POST"]),
            Route("/v1/models", _errors(models), methods=["GET"]),
        ]
    )


def _answer(endpoint, rid, kind, choice, ids, gen) -> JSONResponse:
    usage = {
        "prompt_tokens": len(ids),
        "completion_tokens": len(gen.token_ids),
        "total_tokens": len(ids) + len(gen.token_ids),
    }
    return JSONResponse(
        {
            "id": rid,
            "object": kind,
            "created": int(time.time()),
            "model": endpoint.model_name,
            "choices": [choice],
            "usage": usage,
            "prompt_token_ids": list(ids),
        }
    )


def _errors(handler):
    async def handle(request: Request) -> JSONResponse:
        try:
            return await handler(request)
        except (RequestError, ValueError) as exc:
            return _error(400, "invalid_request_error", str(exc))
        except EngineError as exc:
            return _error(503, "engine_error", f"{type(exc).__name__}: {exc}")

    return handle


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


@contextlib.asynccontextmanager
async def serve_endpoint(endpoint: OpenAIEndpoint, port: int = 0) -> AsyncIterator[str]:
    """Serve `endpoint` on 127.0.0.1 in this event loop (it shares the engine with the caller);
    yields the base URL for the `openai` client (`.../v1`)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(build_app(endpoint), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        await asyncio.shield(task)
        sock.close()
