"""Grading SWE instances: a fresh session, a tree the grader built, a result channel of its own.

    run = await run_tests(tree, inst, limits)          # a fresh session: the tests of `inst`
    tree = await graded_tree(agent_ws, inst, tmp_dir)   # start tree + the agent's source edits
    verdict = judge(run, inst)                          # resolved / partial, with the reason

Order after an episode: every process of the agent's session is killed; the grader rebuilds the
repository on the host from the instance file (start state), then reads from the agent's
workspace ONLY the repository's own non-test source files (is_test_path is false) that exist in
that tree, and overlays them (a file the agent deleted or made unreadable is missing). Tests,
conftest.py, configuration, data files and any file the agent added come from the instance file,
never from the workspace; test_patch is applied on the host. The tests then run in a NEW session
(its own disk, no agent process, a clean shell) with `python3 -I -B` and pytest_runner.py, whose
only trusted output is one nonce-tagged line. Nothing the agent did to its own workspace (chmod,
full disk or inodes, lingering processes, planted sitecustomize/.pth/conftest/stdlib names, stale
bytecode, printed result lines, edited tests) can make this raise or pass. A sandbox failure
(BackendFailure, a session that will not start) raises; the env maps it to InfraError.

Instances that run in their own image (testbed.py) follow the same order without a host tree:
the start state is the image's /testbed (+ bug_patch), the agent's files taken are those of the
manifest made when its session was fresh, and the grader's fresh session runs on the same image
with the image's python (its pytest when it has one).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.swe.instances import Instance
from envs.swe.repo import PatchError, apply_patch, materialize, pytest_bundle, source_files
from envs.swe.runners import passed, runner_for, stage_guarded
from envs.swe.testbed import TESTBED, ImageTree, build_in_session

__all__ = ["TestRun", "Verdict", "graded_tree", "judge", "run_tests"]

SOURCE_MAX_BYTES = 4 << 20
SUCCESS = ("PASSED", "XFAIL")


@dataclass(frozen=True, slots=True)
class TestRun:
    __test__ = False
    statuses: dict[str, str] | None  # nodeid -> status; None: no result line (run died/hung)
    log: str  # pytest's output (up to 8 MiB), for people and the log parser
    timed_out: bool = False
    notes: tuple[str, ...] = ()  # patches that did not apply over the agent's edits (image trees)


@dataclass(frozen=True, slots=True)
class Verdict:
    resolved: bool
    fraction: float  # share of FAIL_TO_PASS + PASS_TO_PASS that pass
    failed: tuple[str, ...]  # required ids that did not pass
    reason: str  # "" when resolved


def judge(run: TestRun, inst: Instance) -> Verdict:
    required = inst.tests
    if run.statuses is None:
        why = "the tests timed out" if run.timed_out else "the test run printed no result"
        return Verdict(False, 0.0, required, why)
    if "__tampered__" in run.statuses:
        why = f"the code under test replaced test machinery ({run.statuses['__tampered__']})"
        return Verdict(False, 0.0, required, why)
    failed = tuple(t for t in required if not passed(t, run.statuses, SUCCESS))
    fraction = 1 - len(failed) / len(required)
    if not failed:
        return Verdict(True, 1.0, (), "")
    shown = ", ".join(f"{t} ({run.statuses.get(t, 'not run')})" for t in failed[:3])
    return Verdict(False, fraction, failed, f"{len(failed)}/{len(required)} tests fail: {shown}")


async def graded_tree(agent_ws: Any, inst: Instance, dest: Path) -> tuple[Path, list[str]]:
    """The tree to test: start state + the agent's versions of its source files + test_patch.
    Returns it and notes on files that could not be taken (missing, unreadable, not a file)."""
    await agent_ws.kill_processes()
    tree = materialize(inst, dest)
    notes: list[str] = []
    changed: list[str] = []
    for rel in source_files(tree):
        try:
            data = await agent_ws.read_file(f"/workspace/repo/{rel}", max_bytes=SOURCE_MAX_BYTES)
        except (OSError, ValueError) as exc:  # deleted, chmod-ed, a FIFO or dir, too big
            (tree / rel).unlink()
            notes.append(f"{rel}: {type(exc).__name__}")
            continue
        if (tree / rel).read_bytes() != data:
            changed.append(rel)
        (tree / rel).write_bytes(data)
    changed_files(tree).write_text("".join(f"{rel}\n" for rel in changed))
    try:
        apply_patch(tree, inst.test_patch, what="test_patch")
    except PatchError as exc:  # only possible when the agent's edits collide with it
        notes.append(f"test_patch: {exc}")
    return tree, notes


def changed_files(tree: Path) -> Path:
    """Beside the graded tree: the source files the agent changed, one per line (the django and
    sympy runners' audit hook marks tampering only from these)."""
    return tree.with_name(tree.name + ".changed")


async def run_tests(
    tree: Path | ImageTree,
    inst: Instance,
    limits: Any,
    *,
    backend: str,
    timeout_s: float = 300.0,
    session_options: dict[str, Any] | None = None,
) -> TestRun:
    """Run the instance's test files on `tree` in a fresh session; the nonce-tagged outcomes.
    A host directory is uploaded to the session; an ImageTree is built in a session on its image
    from the image's pristine /testbed (testbed.py) and tested with the image's python."""
    import sandbox

    nonce = secrets.token_hex(16)
    spec = runner_for(inst)
    options = dict(session_options or {})
    notes: list[str] = []
    if isinstance(tree, ImageTree):
        from sandbox.sessions.images import prepare_image

        prepared = await asyncio.to_thread(prepare_image, tree.image)  # cached after the first
        options["image"] = tree.image
        cwd, python = TESTBED, prepared.test_python
        bundle = "-" if prepared.test_has_pytest else "/workspace/g/deps"
    else:
        cwd, python, bundle = "/workspace/g/repo", "/usr/bin/python3", "/workspace/g/deps"
    async with sandbox.session(limits, backend=backend, **options) as ws:
        if isinstance(tree, ImageTree):
            notes = await build_in_session(ws, tree)
        else:
            await ws.upload(tree, "g/repo")
        if spec.guarded:  # django / sympy: their deps and the changed files (runners.py)
            head = await stage_guarded(ws, spec, _changed(tree))
        else:
            head = ["/workspace/g/nonce", bundle, "/workspace/g/log"]
            if bundle != "-":
                await ws.upload(pytest_bundle(), "g/deps")
        await ws.write_file("g/runner.py", spec.script())
        await ws.write_file("g/nonce", nonce, mode=0o600)
        argv = [*head, *spec.args(list(inst.test_files))]
        command = f"cd {cwd} && exec {_quote(python)} -I -B /workspace/g/runner.py " + " ".join(
            _quote(a) for a in argv
        )
        result = await ws.exec(command, timeout_s=timeout_s, fresh=True)
        try:
            log = (await ws.read_file("g/log", max_bytes=8 << 20)).decode(errors="replace")
        except (OSError, ValueError):
            log = ""
    statuses = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce + " "):
            try:
                parsed = json.loads(line[len(nonce) + 1 :])
            except json.JSONDecodeError:
                break
            if isinstance(parsed, dict):
                statuses = {str(k): str(v) for k, v in parsed.items()}
            break
    return TestRun(statuses, log, timed_out=result.timed_out, notes=tuple(notes))


def _changed(tree: Path | ImageTree) -> list[str]:
    if isinstance(tree, ImageTree):
        return list(tree.edits)
    listed = changed_files(tree)
    return listed.read_text().splitlines() if listed.exists() else []


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="swe-grade-")
