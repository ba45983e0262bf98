"""Multi-turn reference trajectories for SWE-v0's cold start: look, reproduce, edit, test, submit.

`reference_turns` turns an instance's gold patch into the turns an engineer would take with the
env's tools, each an assistant message with one line of prose and its tool calls:
  1. look around: grep for the function the issue names (bash) and view the code around the
     first changed line (view);
  2. reproduce: run the repository's tests for that code (bash), which shows the failure;
  3. edit: the gold patch as str_replace calls (at most `max_calls` per turn);
  4. run the tests again (bash);
  5. submit.
The turns are fixed text (the observations come from stepping the env), built only from what an
agent could know or find: the issue text, the files in the repository, the test files that cover
the module; never the FAIL_TO_PASS ids. Steps whose tool the env does not offer are left out, and
when the turns exceed `max_turns` the optional ones go first (reproduce, then the re-run, then
the look around), so a reference always fits the episode it is stepped in.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection
from typing import Any

from envs.swe.editing import gold_edits
from envs.swe.instances import Instance

__all__ = ["hunk_starts", "reference_turns", "tool_call"]

_FUNCTION = re.compile(r"`([A-Za-z_]\w*)\(\)`")
_HUNK = re.compile(r"^@@ -(\d+)")
_CONTEXT = 12  # lines shown either side of the first changed line


def tool_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def hunk_starts(patch: str) -> list[tuple[str, int]]:
    """(path, first line of the hunk on the old side) per hunk of a unified diff."""
    out: list[tuple[str, int]] = []
    path = ""
    for line in patch.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip()
            path = target[2:] if target.startswith(("a/", "b/")) else target
        elif (found := _HUNK.match(line)) and path:
            out.append((path, int(found[1])))
    return out


def reference_turns(
    inst: Instance, tools: Collection[str], *, max_turns: int, max_calls: int
) -> list[str] | None:
    """The reference trajectory's turns, or None when the env offers no str_replace/submit."""
    edits = gold_edits(inst.gold_patch)
    if not edits or not {"str_replace", "submit"} <= set(tools):
        return None
    calls = [tool_call("str_replace", path=p, old_str=old, new_str=new) for p, old, new in edits]
    edit_turns = [
        _turn(
            "The bug is here; I'll fix it." if i == 0 else "The rest of the fix.",
            calls[i : i + max_calls],
        )
        for i in range(0, len(calls), max_calls)
    ]
    optional: dict[str, str] = {}
    look = _look(inst, tools)
    if look:
        optional["look"] = look
    if "bash" in tools and inst.test_files:
        files = " ".join(shlex.quote(f) for f in inst.test_files)
        optional["reproduce"] = _turn(
            "Let me run the tests for this code to see the failure.",
            [tool_call("bash", command=f"python3 -m pytest -q -x {files} 2>&1 | tail -n 25")],
        )
        optional["verify"] = _turn(
            "Now the tests again, to check the fix and that nothing else broke.",
            [tool_call("bash", command=f"python3 -m pytest -q {files} 2>&1 | tail -n 5")],
        )
    for drop in ("reproduce", "verify", "look"):  # the least needed first
        if len(optional) + len(edit_turns) + 1 <= max_turns:
            break
        optional.pop(drop, None)
    done = "The tests pass; submitting the fix." if "verify" in optional else "Submitting the fix."
    submit = _turn(done, [tool_call("submit")])
    turns = [optional[k] for k in ("look", "reproduce") if k in optional] + edit_turns
    turns += [optional["verify"]] if "verify" in optional else []
    return [*turns, submit]


def _look(inst: Instance, tools: Collection[str]) -> str:
    calls = []
    named = _FUNCTION.search(inst.problem_statement)
    if "bash" in tools and named:
        pattern = shlex.quote(f"def {named[1]}\\b")
        calls.append(tool_call("bash", command=f"grep -rnE {pattern} --include=*.py . | head"))
    starts = hunk_starts(inst.gold_patch)
    if "view" in tools and starts:
        path, line = starts[0]
        # the hunk starts 3 context lines above the change (diff's default)
        first = max(1, line + 3 - _CONTEXT)
        calls.append(tool_call("view", path=path, view_range=[first, line + 3 + _CONTEXT]))
    if not calls:
        return ""
    return _turn("First I'll find the code the issue is about.", calls)


def _turn(prose: str, calls: list[str]) -> str:
    return "\n".join([prose, *calls])
