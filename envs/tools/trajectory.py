"""Scripted multi-turn reference trajectories for tool envs' cold starts.

An env builds the steps of an engineer's episode (look around, reproduce, edit, run the tests
again, submit) from its own tools and task, and `plan_turns` orders them and fits them to the
episode's turn limit: the optional steps go in the order reproduce, re-run, look around, so a
reference never runs past `max_turns`. Each turn is an assistant message: one line of prose, then
its Qwen3/Hermes `<tool_call>` blocks. The turns are fixed text; the cold start steps the env with
them and the observations come from the env, as in a rollout. `in_tool_format` rewrites such a
turn in the format the run's model writes (`rollout.tool_format`, e.g. Qwen3-Coder XML), so the
cold start teaches the format the env's parser reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envs.tools.parsers import format_call, parse_hermes

__all__ = ["in_tool_format", "plan_turns", "references_in_format", "tool_call", "turn"]


def tool_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def in_tool_format(text: str, tool_format: str) -> str:
    """A reference turn written with Hermes calls, in `tool_format`: its prose (the text outside
    the calls) first, then each call as `format_call` writes it in that format. A turn without
    Hermes calls (a final answer, or one already in another format) is returned unchanged."""
    if tool_format == "hermes" or "<tool_call>" not in text:
        return text
    parsed = parse_hermes(text)
    if not parsed.calls:
        return text  # not Hermes JSON: the env wrote it in its own format
    if parsed.errors:
        raise ValueError(
            f"a reference turn has Hermes tool calls that do not parse ({parsed.errors[0].message});"
            f" the env's reference_response is wrong: {text[:200]!r}"
        )
    calls = [format_call(c.name, c.arguments, tool_format) for c in parsed.calls]
    return "\n".join([parsed.content, *calls] if parsed.content else calls)


def references_in_format(
    response: str | Sequence[str] | None, tool_format: str
) -> str | list[str] | None:
    """`reference_response`'s value (one turn or a list of turns) in `tool_format`."""
    if response is None or isinstance(response, str):
        return None if response is None else in_tool_format(response, tool_format)
    return [in_tool_format(t, tool_format) for t in response]


def turn(prose: str, calls: list[str]) -> str:
    return "\n".join([prose, *calls])


def plan_turns(
    *,
    edits: list[str],
    max_calls: int,
    max_turns: int,
    look: list[str] | None = None,
    reproduce: list[str] | None = None,
    verify: list[str] | None = None,
) -> list[str]:
    """The reference's turns: look, reproduce, the edit calls (at most `max_calls` a turn),
    verify, submit; steps given as None (a tool the env does not offer) are left out."""
    edit_turns = [
        turn(
            "The bug is here; I'll fix it." if i == 0 else "The rest of the fix.",
            edits[i : i + max_calls],
        )
        for i in range(0, len(edits), max_calls)
    ]
    optional = {
        "look": ("First I'll find the code the issue is about.", look),
        "reproduce": ("Let me run the tests to see the failure.", reproduce),
        "verify": ("Now the tests again, to check the fix and that nothing else broke.", verify),
    }
    kept = {k: turn(prose, calls) for k, (prose, calls) in optional.items() if calls}
    for drop in ("reproduce", "verify", "look"):  # the least needed first
        if len(kept) + len(edit_turns) + 1 <= max_turns:
            break
        kept.pop(drop, None)
    done = "The tests pass; submitting the fix." if "verify" in kept else "Submitting the fix."
    turns = [kept[k] for k in ("look", "reproduce") if k in kept] + edit_turns
    return [
        *turns,
        *([kept["verify"]] if "verify" in kept else []),
        turn(done, [tool_call("submit")]),
    ]
