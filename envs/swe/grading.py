"""Grading SWE instances: a fresh session, a tree the grader built, a result channel of its own.

    run = await run_tests(tree, inst, limits)          # a fresh session: the tests of `inst`
    tree, notes, changed = await graded_tree(agent_ws, inst, tmp_dir)  # start + agent's sources
    verdict = judge(run, inst)                          # resolved / partial, with the reason

Order after an episode: every process of the agent's session is killed; the grader rebuilds the
repository on the host from the instance file (start state), then reads from the agent's
workspace ONLY the repository's own non-test source files (is_test_path is false) that exist in
that tree, and overlays them (a file the agent deleted or made unreadable is missing). Tests,
conftest.py, configuration, data files and any file the agent added come from the instance file,
never from the workspace; every file test_patch touches is reset to the start state (the agent's
edits to it are discarded, as SWE-bench does) and test_patch is applied on the host (one that does
not apply raises PatchError: the instance is broken, never graded without it). The tests then run
in a NEW session (its own disk, no agent process, a clean shell) with `python3 -I -B` and
pytest_runner.py, whose audit hook is installed before any repository code runs and whose only
trusted output is its nonce-tagged records; tampering it sees scores 0 (`tampered: <what>`), and
only a test that ran to PASSED counts (not XFAIL, XPASS, SKIPPED or ERROR). Nothing the agent did to its own workspace (chmod,
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
import dataclasses
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.swe.instances import Instance
from envs.swe.repo import apply_patch, materialize, pytest_bundle, source_files
from envs.swe.runners import DEPS, passed, runner_for
from envs.swe.testbed import TESTBED, ImageTree, build_in_session, patch_paths

__all__ = ["TestRun", "Verdict", "graded_tree", "judge", "parse_records", "run_tests"]

SOURCE_MAX_BYTES = 4 << 20
# Only a test that ran to a pass counts: XFAIL, XPASS, SKIPPED, ERROR and "not run" do not (the
# swebench harness 5.0.2 also counts XFAIL, which code under test can produce: pytest.xfail()).
SUCCESS = ("PASSED",)


@dataclass(frozen=True, slots=True)
class TestRun:
    __test__ = False
    statuses: dict[str, str] | None  # nodeid -> status; None: no result line (run died/hung)
    log: str  # pytest's output (up to 8 MiB), for people and the log parser
    timed_out: bool = False
    notes: tuple[str, ...] = ()  # patches that did not apply over the agent's edits (image trees)
    tampered: str = ""  # what the code under test did to the interpreter ("" when nothing)
    ended: bool | None = None  # the runner's end-of-session record came (None: not known)


@dataclass(frozen=True, slots=True)
class Verdict:
    resolved: bool
    fraction: float  # share of FAIL_TO_PASS + PASS_TO_PASS that pass
    failed: tuple[str, ...]  # required ids that did not pass
    reason: str  # "" when resolved
    tampered: bool = False  # the run was refused: the code under test tampered with the runner


def judge(run: TestRun, inst: Instance) -> Verdict:
    required = inst.tests
    if run.tampered:
        return Verdict(False, 0.0, required, f"tampered: {run.tampered}", tampered=True)
    if run.statuses is None:
        why = "the tests timed out" if run.timed_out else "the test run printed no result"
        if not run.timed_out and run.ended is False:
            why = "the test run ended before pytest finished (no end-of-session record)"
        return Verdict(False, 0.0, required, why)
    failed = tuple(t for t in required if not passed(t, run.statuses, SUCCESS))
    fraction = 1 - len(failed) / len(required)
    if not failed:
        return Verdict(True, 1.0, (), "")
    shown = ", ".join(f"{t} ({run.statuses.get(t, 'not run')})" for t in failed[:3])
    return Verdict(False, fraction, failed, f"{len(failed)}/{len(required)} tests fail: {shown}")


def status_of(phase: str, outcome: str, wasxfail: bool, prior: str | None) -> str:
    """SWE-bench's statuses: PASSED / FAILED / SKIPPED / ERROR / XFAIL, worst phase wins."""
    if phase == "call":
        if wasxfail:
            status = "XFAIL" if outcome == "skipped" else "FAILED"  # an XPASS(strict) fails
        else:
            status = outcome.upper()
    elif outcome == "failed":
        status = "ERROR"
    elif outcome == "skipped":
        status = "SKIPPED"
    else:
        return prior or "PASSED"
    if prior in ("FAILED", "ERROR"):
        return prior
    return status


def parse_records(stdout: str, nonce: str) -> tuple[dict[str, str] | None, str, bool]:
    """The runner's nonce-tagged records: (statuses or None without an end record, what was
    tampered with ("" when nothing), whether the end record came)."""
    statuses: dict[str, str] = {}
    tampered: list[str] = []
    ended = False
    for line in stdout.splitlines():
        if not line.startswith(nonce + " "):
            continue
        kind, _, rest = line[len(nonce) + 1 :].partition(" ")
        try:
            if kind == "R":
                node_hex, phase, outcome, xfail = rest.split(" ")
                nodeid = bytes.fromhex(node_hex).decode(errors="replace")
                statuses[nodeid] = status_of(phase, outcome, xfail == "1", statuses.get(nodeid))
            elif kind == "T":
                tampered.append(bytes.fromhex(rest).decode(errors="replace"))
            elif kind == "E":
                ended = True
        except ValueError:
            tampered.append("a malformed record on the result channel")
    shown = "; ".join(dict.fromkeys(tampered))[:400]
    return (statuses if ended else None), shown, ended


async def graded_tree(
    agent_ws: Any, inst: Instance, dest: Path
) -> tuple[Path, list[str], tuple[str, ...]]:
    """The tree to test: start state + the agent's versions of its source files + test_patch,
    applied as SWE-bench applies it: every file test_patch touches is first reset to the start
    state (the agent's edits to them are discarded). Returns the tree, notes on files that could
    not be taken (missing, unreadable, not a file) and the files the agent changed. A test_patch
    that does not apply to the start state raises PatchError (the instance is broken)."""
    await agent_ws.kill_processes()
    tree = materialize(inst, dest)
    reset = set(patch_paths(inst.test_patch))
    notes, changed = [], []
    for rel in source_files(tree):
        if rel in reset:
            continue
        try:
            data = await agent_ws.read_file(f"/workspace/repo/{rel}", max_bytes=SOURCE_MAX_BYTES)
        except (OSError, ValueError) as exc:  # deleted, chmod-ed, a FIFO or dir, too big
            (tree / rel).unlink()
            notes.append(f"{rel}: {type(exc).__name__}")
            continue
        if data != (tree / rel).read_bytes():
            (tree / rel).write_bytes(data)
            changed.append(rel)
    apply_patch(tree, inst.test_patch, what=f"{inst.instance_id}: test_patch")
    return tree, notes, tuple(changed)


async def run_tests(
    tree: Path | ImageTree,
    inst: Instance,
    limits: Any,
    *,
    backend: str,
    timeout_s: float = 300.0,
    session_options: dict[str, Any] | None = None,
    changed: tuple[str, ...] | None = None,
) -> TestRun:
    """Run the instance's test files on `tree` in a fresh session; the nonce-tagged outcomes.
    A host directory is uploaded to the session; an ImageTree is built in a session on its image
    from the image's pristine /testbed (testbed.py) and tested with the image's python. `changed`:
    the repository files the agent changed (an ImageTree's edits when None): the runner treats
    their code, and code of files created during the run, as untrusted."""
    import sandbox

    nonce = secrets.token_hex(16)
    if hasattr(limits, "output_bytes"):  # one record per test on stdout
        limits = dataclasses.replace(limits, output_bytes=max(limits.output_bytes, 8 << 20))
    spec = runner_for(inst)  # pytest, or Django's / sympy's own (runners.py)
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
        if spec.guarded:  # django / sympy: their pure-Python wheels, imported in place
            spec.wheels()  # a clear error when one is missing
            await ws.upload(DEPS, "g/deps")
            bundle = "/workspace/g/deps"
        elif bundle != "-":
            await ws.upload(pytest_bundle(), "g/deps")
        await ws.write_file("g/runner.py", spec.script())
        await ws.write_file("g/nonce", nonce, mode=0o600)
        if changed is None:
            changed = tuple(tree.edits) if isinstance(tree, ImageTree) else ()
        await ws.write_file("g/changed", "".join(f"{rel}\n" for rel in changed))
        command = (
            f"cd {cwd} && exec {_quote(python)} -I -B /workspace/g/runner.py "
            f"/workspace/g/nonce {bundle} /workspace/g/log /workspace/g/changed "
            + " ".join(_quote(a) for a in spec.args(list(inst.test_files)))
        )
        result = await ws.exec(command, timeout_s=timeout_s, fresh=True)
        try:
            log = (await ws.read_file("g/log", max_bytes=8 << 20)).decode(errors="replace")
        except (OSError, ValueError):
            log = ""
    statuses, tampered, ended = parse_records(result.stdout, nonce)
    return TestRun(
        statuses,
        log,
        timed_out=result.timed_out,
        notes=tuple(notes),
        tampered=tampered,
        ended=ended,
    )


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="swe-grade-")
