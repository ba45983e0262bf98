"""Scripted multi-turn reference trajectories for tool envs' cold starts.

An env builds the steps of an engineer's episode (look around, reproduce, edit, run the tests
again, submit) from its own tools and task, and `plan_turns` orders them and fits them to the
episode's turn limit: the optional steps go in the order reproduce, re-run, look around, so a
reference never runs past `max_turns`. Each turn is an assistant message: one line of prose, then
its Qwen3/Hermes `<tool_call>` blocks. The turns are fixed text; the cold start steps the env with
them and the observations come from the env, as in a rollout.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["plan_turns", "tool_call", "turn"]


def tool_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


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
