"""Tool calling: schemas from signatures and docstrings, the parser registry, and ToolEnv's
handling of every kind of malformed call (an error observation, never a crash)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import pytest

from envs.errors import InfraError
from envs.tools import (
    ParsedTurn,
    ToolCall,
    ToolEnv,
    ToolError,
    get_parser,
    parse_hermes,
    parser_names,
    register_parser,
    tool,
    tool_schema,
)


def search(
    query: str,
    limit: int = 5,
    mode: Literal["exact", "fuzzy"] = "exact",
    tags: list[str] | None = None,
    scale: float = 1.0,
    strict: bool = False,
) -> str:
    """Search the index.

    Longer text that is not part of the summary.

    Args:
        query: what to look for.
        limit: at most this many
            results (continued line).
        mode: how to match.
    Returns:
        the hits.
    """
    return query


def test_schema_comes_from_signature_and_docstring():
    schema = tool_schema(search)
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "search" and fn["description"] == "Search the index."
    props = fn["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for."}
    assert props["limit"] == {
        "type": "integer",
        "description": "at most this many results (continued line).",
    }
    assert props["mode"] == {
        "type": "string",
        "enum": ["exact", "fuzzy"],
        "description": "how to match.",
    }
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["scale"] == {"type": "number"} and props["strict"] == {"type": "boolean"}
    assert fn["parameters"]["required"] == ["query"]
    json.dumps(schema)  # JSON-able as is


def test_schema_refuses_what_it_cannot_describe():
    def untyped(x) -> str:  # type: ignore[no-untyped-def]
        return ""

    def weird(x: set[int]) -> str:
        return ""

    with pytest.raises(TypeError, match="no type annotation"):
        tool_schema(untyped)
    with pytest.raises(TypeError, match="no JSON schema"):
        tool_schema(weird)


def test_hermes_parses_several_calls_and_the_text_around_them():
    text = (
        'Let me look.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": \\"z\\"}"}</tool_call> done'
    )
    turn = parse_hermes(text)
    assert turn.calls == [ToolCall("a", {"x": 1}), ToolCall("b", {"y": "z"})]
    assert turn.errors == [] and turn.content == "Let me look.\n\n done"


@pytest.mark.parametrize(
    "body, fragment",
    [
        ('{"name": "a", "arguments": {', "not valid JSON"),
        ('["a"]', "must be a JSON object"),
        ('{"arguments": {}}', 'no "name"'),
        ('{"name": "a", "arguments": [1]}', '"arguments" must be a JSON object'),
        ('{"name": "a", "arguments": "not json"}', "not a JSON object"),
    ],
)
def test_hermes_turns_unreadable_calls_into_errors(body, fragment):
    turn = parse_hermes(f"<tool_call>{body}</tool_call>")
    assert turn.calls == [] and len(turn.errors) == 1 and fragment in turn.errors[0].message


def test_hermes_reports_an_unclosed_block():
    turn = parse_hermes('<tool_call>{"name": "a", "arguments": {}}\n')
    assert turn.calls == [] and "not closed" in turn.errors[0].message


def test_parser_registry_finds_registered_parsers_and_names_the_known_ones():
    @register_parser("test-bracket")
    def bracket(text: str) -> ParsedTurn:
        name, _, arg = text.strip("[]").partition(":")
        return ParsedTurn([ToolCall(name, {"x": arg})])

    assert get_parser("test-bracket") is bracket and "hermes" in parser_names()
    with pytest.raises(ValueError, match="registered: .*hermes"):
        get_parser("nope")


class Calc(ToolEnv):
    """A test env: integer tools, one async, one that fails, one that ends the episode."""

    max_tool_calls_per_turn = 3

    def __init__(self, **kw: Any) -> None:
        super().__init__(max_turns=3, **kw)
        self.total = 0
        self.closed = 0

    def initial_messages(self, task):
        return [{"role": "user", "content": "add things"}]

    @tool
    def add(self, x: int) -> str:
        """Add x to the total.

        Args:
            x: the amount.
        """
        self.total += x
        return str(self.total)

    @tool
    async def slow_double(self) -> int:
        """Double the total, slowly."""
        await asyncio.sleep(0)
        self.total *= 2
        return self.total

    @tool
    def broken(self) -> str:
        """Always fails."""
        raise ToolError("it is broken")

    @tool
    def crash(self) -> str:
        """An env bug."""
        raise KeyError("oops")

    @tool
    def infra(self) -> str:
        """The sandbox died."""
        raise InfraError("backend gone")

    @tool
    def done(self) -> str:
        """End the episode."""
        self.end_episode()
        return "ok"

    async def final_reward(self, text):
        return float(self.total == 6)

    async def on_close(self):
        self.closed += 1


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def run(env: ToolEnv, action: str):
    return asyncio.run(env.astep(action))


def started() -> Calc:
    env = Calc()
    asyncio.run(env.areset(options={"task": {"id": "t"}}))
    return env


def test_tool_calls_run_in_order_and_results_come_back_as_tool_messages():
    env = started()
    obs, reward, term, trunc, info = run(
        env, call("add", x=2) + call("slow_double") + call("add", x=2)
    )
    assert obs == [{"role": "tool", "content": c} for c in ("2", "4", "6")]
    assert (reward, term, trunc) == (0.0, False, False)
    obs, reward, term, trunc, info = run(env, call("done"))
    assert (obs, reward, term, trunc) == ([], 1.0, True, False) and info["end"] == "ended_by_tool"
    m = info["env_metrics"]
    assert (m["turns"], m["tool_calls"], m["tool_errors"], m["parse_failures"]) == (2, 4, 0, 0)


@pytest.mark.parametrize(
    "action, fragment, counter",
    [
        (
            '<tool_call>{"name": "add", "arguments": {"x": </tool_call>',
            "not valid JSON",
            "parse_failures",
        ),
        (call("mul", x=2), "unknown tool 'mul'; available: add, broken", "tool_errors"),
        (call("add", y=2), "unknown argument(s) y", "tool_errors"),
        (call("add"), "missing required argument(s) x", "tool_errors"),
        (call("add", x="2"), "argument 'x': expected integer, got string", "tool_errors"),
        (call("add", x=True), "expected integer, got boolean", "tool_errors"),
        (call("broken"), "Error: it is broken", "tool_errors"),
        (call("crash"), "crash failed: KeyError", "tool_errors"),
        (call("add", x=1) * 5, "too many tool calls in one turn (5); at most 3", "tool_errors"),
    ],
)
def test_malformed_calls_become_error_observations(action, fragment, counter):
    env = started()
    obs, reward, term, trunc, info = run(env, action)
    assert not term and not trunc and reward == 0.0  # the episode goes on
    assert obs and all(m["role"] == "tool" for m in obs)
    assert fragment in obs[-1]["content"] and obs[-1]["content"].startswith("Error")
    assert info["env_metrics"][counter] >= 1
    # and the env still works afterwards
    obs, *_ = run(env, call("add", x=1))
    assert obs[0]["content"].isdigit()


def test_parse_ok_fraction_counts_unreadable_calls():
    env = started()
    _, _, _, _, info = run(env, call("add", x=1) + "<tool_call>{bad}</tool_call>")
    assert info["env_metrics"]["parse_ok_frac"] == 0.5
    assert info["env_metrics"]["tool_call_attempts"] == 2


def test_parse_ok_fraction_is_absent_without_attempts():
    """No call attempted, no fraction: a policy that never calls a tool must not read as 1.0
    (the step mean then covers only the episodes that tried)."""
    env = started()
    _, _, _, _, info = run(env, "no tool call here, just an answer")
    assert info["env_metrics"]["tool_call_attempts"] == 0
    assert "parse_ok_frac" not in info["env_metrics"]


def test_infrastructure_errors_propagate():
    env = started()
    with pytest.raises(InfraError):
        run(env, call("infra"))


def test_a_turn_without_calls_ends_the_episode_with_the_final_reward():
    env = started()
    obs, reward, term, trunc, info = run(env, "I am done, the total is 0.")
    assert (obs, reward, term, trunc, info["end"]) == ([], 0.0, True, False, "final_message")


def test_the_turn_limit_truncates():
    env = started()
    for _ in range(2):
        assert not run(env, call("add", x=3))[3]
    obs, reward, term, trunc, info = run(env, call("add", x=0))
    assert trunc and not term and info["end"] == "turn_limit" and reward == 1.0  # total 6


def test_calls_after_the_one_that_ends_the_episode_are_not_run():
    env = started()
    _, _, term, _, _ = run(env, call("add", x=6) + call("done") + call("add", x=100))
    assert term and env.total == 6


def test_close_runs_on_close_and_sync_step_inside_a_loop_names_the_async_api():
    env = started()
    asyncio.run(env.aclose())
    assert env.closed == 1

    async def inside_a_loop():
        with pytest.raises(RuntimeError, match="await env.astep"):
            env.step(call("add", x=1))

    asyncio.run(inside_a_loop())


def test_plain_gymnasium_step_runs_the_episode_on_the_envs_own_loop():
    env = Calc()
    env.reset(options={"task": {"id": "t"}})
    assert env.closed == 0
    obs, reward, terminated, truncated, _ = env.step(call("add", x=1))
    assert obs[0]["role"] == "tool" and not (terminated or truncated)
    env.reset(options={"task": {"id": "u"}})  # the previous episode's on_close ran
    assert env.closed == 1
    env.step(call("add", x=1))
    env.close()
    assert env.closed == 2 and env._sync_loop is None


def test_unknown_parser_name_fails_at_construction():
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        Calc(tool_parser="nope")


class _Workspace:
    """A session workspace whose calls answer, spend the budget, or break, as told."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome

    async def exec(self, source: str, *, timeout_s: float) -> Any:
        from sandbox import SandboxError
        from sandbox.sessions.api import SessionBudgetExceeded

        if self.outcome == "budget":
            raise SessionBudgetExceeded("cpu 60 s")
        if self.outcome == "broken":
            raise SandboxError("container gone")
        from sandbox.sessions.api import ExecResult

        crossed = self.outcome == "crossed"  # this call spent the rest of the budget
        return ExecResult(0, "", "", 0, 0, 0.1, 0.1, False, budget_exhausted=crossed)


@pytest.mark.parametrize("outcome", ["ok", "crossed", "budget", "broken"])
def test_a_session_call_maps_budget_to_a_tool_error_and_breakage_to_infra(outcome):
    from envs.tools.session import EpisodeSession

    session, ended = EpisodeSession(), []
    session.ws = _Workspace(outcome)
    call = session.call(
        "exec", "ls", timeout_s=1, on_budget_spent=lambda: ended.append(1), budget_message="{exc}!"
    )
    if outcome == "ok":
        assert asyncio.run(call) == "(no output)" and not session.budget_exhausted
    elif outcome == "crossed":  # its output still reaches the model; the episode ends
        assert asyncio.run(call) == "(no output)" and session.budget_exhausted and ended == [1]
    elif outcome == "budget":
        with pytest.raises(ToolError, match=r"^cpu 60 s!$"):
            asyncio.run(call)
        assert session.budget_exhausted and ended == [1]
    else:
        with pytest.raises(InfraError, match="sandbox session failed: container gone"):
            asyncio.run(call)
        assert not session.budget_exhausted and not ended
