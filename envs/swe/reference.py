"""Multi-turn reference trajectories for SWE-v0's cold start: look, reproduce, edit, test, submit.

`reference_turns` turns an instance's gold patch into the turns an engineer would take with the
env's tools (planned by envs/tools/trajectory.py):
  1. look around: grep for the function the issue names (bash) and view the code around the
     first changed line (view);
  2. reproduce: run the repository's test files for that code, stopping at the first failure;
  3. edit: the gold patch as str_replace calls;
  4. run the tests again;
  5. submit.
They are built only from what an agent could know or find: the issue text, the files in the
repository, the test files that cover the module; never the FAIL_TO_PASS ids. Steps whose tool
the env does not offer are left out, and a short `max_turns` drops the optional ones.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection

from envs.swe.editing import gold_edits
from envs.swe.instances import Instance
from envs.swe.runners import runner_for
from envs.tools.trajectory import plan_turns, tool_call

__all__ = ["hunk_starts", "reference_turns"]

_FUNCTION = re.compile(r"`([A-Za-z_]\w*)\(\)`")
_HUNK = re.compile(r"^@@ -(\d+)")
_CONTEXT = 6  # lines shown either side of the first changed line (a short view: CPU contexts)


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
    run = verify = None
    if "bash" in tools and inst.test_files:
        spec, files = runner_for(inst), list(inst.test_files)
        run = [tool_call("bash", command=f"{spec.agent_command(files)} 2>&1 | tail -n 25")]
        verify = [
            tool_call("bash", command=f"{spec.agent_command(files, quiet=True)} 2>&1 | tail -n 5")
        ]
    return plan_turns(
        edits=[tool_call("str_replace", path=p, old_str=old, new_str=new) for p, old, new in edits],
        max_calls=max_calls,
        max_turns=max_turns,
        look=_look(inst, tools),
        reproduce=run,
        verify=verify,
    )


def _look(inst: Instance, tools: Collection[str]) -> list[str]:
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
    return calls
