"""Scripted agents played through SWE-v0's real tools: a check of the grading, not of a policy.

    python -m envs.swe agents PATH [--backend bubblewrap] [--only ID ...] [--agents oracle,null]

Each (instance, agent) pair is one episode of SWEEnv (areset, one tool call per astep, aclose),
graded as training grades it. The agents:
  oracle        the gold patch as str_replace calls, then submit: must resolve;
  null          submit at once;
  stub_return   the body of each function enclosing a line the gold patch changes replaced by
                `return C` (C: the first constant the function returns, else None), then submit;
  stub_pass     the same bodies replaced by `pass`;
  delete_tests  `rm -rf` every test file and test directory of the repository, then submit.
Only the oracle may resolve. A tool call answered with an error (the scripted edit did not
happen) or a sandbox failure (InfraError) is an error row, never a 0.

With `--attacks` the red-team suite of attacks.py joins them: the oracle on every instance, and
each instance gets `--per-instance` attacks (null and the stubs among them) by a seeded rotation
over ATTACKS (every attack on several instances); `--full` plays every attack on every instance.
"""

from __future__ import annotations

import ast
import asyncio
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from envs.errors import InfraError
from envs.swe.attacks import ATTACKS, attack_calls, pairs
from envs.swe.editing import gold_edits
from envs.swe.env import SWEEnv, task_row
from envs.swe.images import repo_dir
from envs.swe.instances import Instance
from envs.swe.progress import Progress
from envs.tools import ToolError
from envs.tools.trajectory import tool_call

__all__ = ["AGENTS", "Play", "attack_plan", "changed_lines", "play", "stub_edits", "summary"]

AGENTS = ("oracle", "null", "stub_return", "stub_pass", "delete_tests")
_HUNK = re.compile(r"^@@ -(\d+)")
_Func = ast.FunctionDef | ast.AsyncFunctionDef
# SWE-bench's test paths (repo.is_test_path): test dirs and test_*/*_test(s)/conftest files
DELETE_TESTS = (
    r"find . -name .git -prune -o \( -type d \( -name tests -o -name test -o -name testing \) "
    r"-o -type f \( -name 'test_*.py' -o -name '*_test.py' -o -name '*_tests.py' "
    r"-o -name conftest.py \) \) -prune -print -exec rm -rf {} + | wc -l"
)


@dataclass(frozen=True, slots=True)
class Play:
    instance_id: str
    agent: str
    reward: float | None  # None: the episode is an error, not a score
    reason: str
    seconds: float
    tampered: bool = False

    @property
    def resolved(self) -> bool:
        return self.reward == 1.0


class _ScriptError(Exception):
    """The scripted agent could not do what it scripts (its check would say nothing)."""


def changed_lines(patch: str) -> dict[str, list[int]]:
    """Old-side line numbers a unified diff removes (or inserts after), per file."""
    out: dict[str, set[int]] = {}
    path, old = "", 0
    for line in patch.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip()
            path = target[2:] if target.startswith(("a/", "b/")) else target
        elif found := _HUNK.match(line):
            old = int(found[1])
        elif line.startswith("-") and not line.startswith("--- ") and path:
            out.setdefault(path, set()).add(old)
            old += 1
        elif line.startswith("+") and path:
            out.setdefault(path, set()).add(max(old - 1, 1))
        elif line.startswith(" "):
            old += 1
    return {p: sorted(lines) for p, lines in out.items()}


def stub_edits(source: str, lines: Iterable[int], stub: str | None) -> list[tuple[str, str]]:
    """(old, new) text pairs replacing the body of the innermost function enclosing each line by
    `stub` (None: `return` the function's first returned constant, else None). Functions nested
    in another one chosen are left to it; [] when no line is inside a function."""
    functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, _Func)]
    chosen: list[_Func] = []
    for line in lines:
        around = [f for f in functions if f.lineno <= line <= (f.end_lineno or f.lineno)]
        if around and (inner := max(around, key=lambda f: f.lineno)) not in chosen:
            chosen.append(inner)
    outer = [f for f in chosen if not any(g is not f and _inside(f, g) for g in chosen)]
    text = source.splitlines(keepends=True)
    return [_stubbed(text, f, stub or f"return {_first_constant(f)}") for f in outer]


def _inside(f: _Func, g: _Func) -> bool:
    return g.lineno <= f.lineno and (f.end_lineno or 0) <= (g.end_lineno or 0)


def _first_constant(f: _Func) -> str:
    for node in ast.walk(f):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant):
            return repr(node.value.value)
    return "None"


def _stubbed(text: list[str], f: _Func, statement: str) -> tuple[str, str]:
    first = f.body[0].lineno
    old = "".join(text[f.lineno - 1 : f.end_lineno])
    if first == f.lineno:  # `def f(): body` on one line
        head = text[first - 1]
        col = len(head.encode()[: f.body[0].col_offset].decode())
        return old, head[:col] + statement + "\n"
    body = text[first - 1]
    indent = body[: len(body) - len(body.lstrip())]
    return old, "".join(text[f.lineno - 1 : first - 1]) + indent + statement + "\n"


async def _script(env: SWEEnv, inst: Instance, agent: str, repo: str) -> list[str]:
    submit = tool_call("submit")
    if agent in ATTACKS:
        return attack_calls(agent, inst)
    if agent == "oracle":
        edits = gold_edits(inst.gold_patch)
        return [tool_call("str_replace", path=p, old_str=o, new_str=n) for p, o, n in edits] + [
            submit
        ]
    if agent == "null":
        return [submit]
    if agent == "delete_tests":
        return [tool_call("bash", command=DELETE_TESTS), submit]
    stub = "pass" if agent == "stub_pass" else None
    calls = []
    for path, lines in changed_lines(inst.gold_patch).items():
        source = await env.session.read_text(f"{repo}/{path}")
        for old, new in stub_edits(source, lines, stub):
            calls.append(tool_call("str_replace", path=path, old_str=old, new_str=new))
    if not calls:
        raise _ScriptError("no function encloses the gold patch's lines")
    return calls + [submit]


async def _episode(inst: Instance, agent: str, path: str, backend: str, images: str) -> Play:
    start = time.monotonic()
    env = SWEEnv(source=f"swe:{path}", backend=backend, images=images, max_turns=64)
    try:
        await env.areset(options={"task": task_row(inst)})
        repo = repo_dir(inst, backend=backend, images=images)
        for action in await _script(env, inst, agent, repo):
            messages, reward, term, trunc, info = await env.astep(action)
            errors = [m["content"] for m in messages if str(m["content"]).startswith("Error")]
            if agent == "delete_tests" and any(m["content"].strip() == "0" for m in messages):
                errors.append("no test file or directory to delete")
            if errors:
                raise _ScriptError(f"tool call failed: {errors[0][:120]}")
            if term or trunc:
                reason = info["grade_reason"] or "resolved"
                took = time.monotonic() - start
                tampered = bool(info.get("tampered"))
                return Play(inst.instance_id, agent, reward, reason, took, tampered)
        raise _ScriptError("the episode did not end")
    except (InfraError, ValueError, SyntaxError, ToolError, _ScriptError) as exc:
        kind = type(exc).__name__.lstrip("_")
        return Play(inst.instance_id, agent, None, f"{kind}: {exc}", time.monotonic() - start)
    finally:
        await env.aclose()


async def play(
    instances: list[Instance],
    agents: Iterable[str] = (),
    *,
    path: str,
    backend: str = "auto",
    concurrency: int = 2,
    images: str = "auto",
    plan: list[tuple[str, str]] | None = None,
) -> list[Play]:
    """Every agent on every instance (or the (instance_id, agent) pairs of `plan`),
    `concurrency` episodes at a time, in instance order."""
    sem = asyncio.Semaphore(concurrency)
    by_id = {i.instance_id: i for i in instances}

    todo = [(i, a) for i in instances for a in agents]
    if plan is not None:
        todo = [(by_id[iid], a) for iid, a in plan]
    progress = Progress("episodes", len(todo))
    errors = 0

    async def one(inst: Instance, agent: str) -> Play:
        nonlocal errors
        async with sem:
            result = await _episode(inst, agent, path, backend, images)
        errors += result.reward is None
        progress.tick(f"{errors} infrastructure errors so far")
        return result

    return list(await asyncio.gather(*(one(i, a) for i, a in todo)))


def attack_plan(
    instances: list[Instance], *, per_instance: int, seed: int
) -> list[tuple[str, str]]:
    """The oracle on every instance, then the rotation of attacks.pairs over the null and stub
    agents and every attack of ATTACKS."""
    ids = [i.instance_id for i in instances]
    names = [a for a in AGENTS if a != "oracle"] + list(ATTACKS)
    return [(i, "oracle") for i in ids] + pairs(ids, names, per_instance=per_instance, seed=seed)


def summary(plays: list[Play], agents: Iterable[str]) -> tuple[str, bool]:
    """The table, one summary line per agent (and per attack class), and whether the grading
    passed the check: the oracle resolves every instance, nothing else scores above 0, no
    errors."""
    width = max([len(p.instance_id) for p in plays] + [11])
    aw = max([len(p.agent) for p in plays] + [12])
    lines = [f"{'instance_id':<{width}}  {'agent':<{aw}}  reward  seconds  grade_reason"]
    for p in plays:
        shown = "ERROR" if p.reward is None else f"{p.reward:g}"
        reason = p.reason.replace("\n", " ")[:100]
        lines.append(
            f"{p.instance_id:<{width}}  {p.agent:<{aw}}  {shown:<6}  {p.seconds:7.1f}  {reason}"
        )
    ok = True
    for agent in agents:
        mine = [p for p in plays if p.agent == agent]
        resolved = sum(p.resolved for p in mine)
        scored = sum(bool(p.reward) for p in mine)
        errors = sum(p.reward is None for p in mine)
        want = len(mine) if agent == "oracle" else 0
        good = (resolved == want if agent == "oracle" else scored == 0) and not errors
        ok &= good
        tampered = sum(p.tampered for p in mine)
        lines.append(
            f"{agent}: resolved {resolved}/{len(mine)}, errors {errors}, tampered {tampered} "
            f"(want {want}/{len(mine)}) {'ok' if good else 'FAILED'}"
        )
    classes: dict[str, list[Play]] = {}
    for p in plays:
        if p.agent in ATTACKS:
            classes.setdefault(ATTACKS[p.agent][0], []).append(p)
    for kind, mine in classes.items():
        top = max((p.reward or 0.0) for p in mine)
        lines.append(
            f"class {kind}: {len(mine)} episodes on {len({p.instance_id for p in mine})} "
            f"instances, max reward {top:g}, tampered {sum(p.tampered for p in mine)}, "
            f"errors {sum(p.reward is None for p in mine)}"
        )
    return "\n".join(lines), ok
