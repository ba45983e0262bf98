"""Gold validation of SWE instances, as SWE-bench's harness validates its own.

For each instance: its tests run on the start state (with test_patch) and again with the gold
patch applied; an instance is valid when every FAIL_TO_PASS test fails before and passes after,
and every PASS_TO_PASS test passes both times. Both runs go through the grader's own path
(grading.run_tests), and the pytest log of each run is also parsed the way SWE-bench parses
logs (`parse_pytest_log`); a disagreement between the two is reported as broken too.

    python -m envs.swe validate PATH [--backend bubblewrap] [--images auto] [--only ID ...]

An instance runs where an episode would (images.py): in its own image when the docker engine
has it or can pull it (the gold and test patches applied in the session to the image's
/testbed), else from its repo_path on the per-repository dependency image.

prints one row per instance and exits 1 when any instance is broken.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from envs.swe.grading import SUCCESS, TestRun, run_tests
from envs.swe.images import placement, repo_options
from envs.swe.instances import Instance
from envs.swe.progress import Progress
from envs.swe.repo import PatchError, apply_patch, materialize
from envs.swe.runners import parse_log, runner_for
from envs.swe.testbed import ImageTree, patch_paths

__all__ = ["Validation", "parse_pytest_log", "validate"]

_STATUSES = ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS")


def parse_pytest_log(log: str) -> dict[str, str]:
    """SWE-bench's pytest log parser: the `-rA` summary lines `STATUS nodeid [- message]`. A
    parametrized id may itself hold " - " inside its brackets; the message starts after them."""
    out: dict[str, str] = {}
    for raw in log.splitlines():
        status, _, rest = raw.strip().partition(" ")
        if status not in _STATUSES or "::" not in rest:
            continue
        out[_node_id(rest)] = status
    return out


def _node_id(rest: str) -> str:
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif depth == 0 and rest.startswith(" - ", i):
            return rest[:i]
    return rest


@dataclass(frozen=True, slots=True)
class Validation:
    instance_id: str
    ok: bool
    problems: tuple[str, ...]
    seconds: float


async def validate_one(
    inst: Instance, limits: object, *, backend: str, tmp: Path, images: str = "auto"
) -> Validation:
    start = time.monotonic()
    problems: list[str] = []
    runs: list[TestRun] = []
    try:
        place = await asyncio.to_thread(placement, inst, backend=backend, images=images)
        for gold in (False, True):
            tree: Path | ImageTree
            options = {}
            if place.in_image:  # the image's /testbed, patched in the session
                post = [("test_patch", inst.test_patch)] + [("gold patch", inst.gold_patch)] * gold
                tree = ImageTree(inst.image, (("bug patch", inst.bug_patch),), {}, tuple(post))
            else:
                tree = tmp / inst.instance_id.replace("/", "_") / ("gold" if gold else "start")
                materialize(inst, tree, with_tests=True)
                if gold:
                    apply_patch(tree, inst.gold_patch, what="gold patch")
                options = await asyncio.to_thread(
                    repo_options, tree, backend=backend, images=images
                )
            # the gold run trusts exactly what an oracle episode's grading would: the gold's
            # files are the changed ones (a gold patch that trips the runner's checks is broken)
            changed = tuple(patch_paths(inst.gold_patch)) if gold else ()
            run = await run_tests(
                tree, inst, limits, backend=backend, session_options=options, changed=changed
            )
            if run.notes:
                raise PatchError("; ".join(run.notes))
            if run.tampered:
                raise PatchError(
                    f"the runner saw tampering {'after' if gold else 'before'} the "
                    f"gold patch: {run.tampered}"
                )
            runs.append(run)
    except (PatchError, ValueError) as exc:
        return Validation(inst.instance_id, False, (str(exc),), time.monotonic() - start)
    before, after = runs
    for label, run in (("before", before), ("after", after)):
        if run.statuses is None:
            problems.append(f"no result {label} the gold patch")
            continue
        spec = runner_for(inst)
        parsed = parse_log(spec, run.log)
        parsed = parse_pytest_log(run.log) if parsed is None else parsed
        # Django's verbose line shows a test's docstring instead of its name: SWE-bench reads
        # that line as the id, so a name-id is checked only where the line shows the name
        seen = parsed if spec.name == "django" else run.statuses
        wrong = [
            t
            for t in inst.tests
            if t in run.statuses and t in seen and parsed.get(t) != run.statuses[t]
        ]
        if wrong:
            problems.append(f"log parser disagrees {label}: {wrong[:2]}")
    if before.statuses is not None and after.statuses is not None:
        problems += _compare(inst, before.statuses, after.statuses)
    return Validation(inst.instance_id, not problems, tuple(problems), time.monotonic() - start)


def _compare(inst: Instance, before: dict[str, str], after: dict[str, str]) -> list[str]:
    problems = []
    if inst.schema == "r2e-gym":  # required tests, not split into F2P / P2P
        problems += [f"fails after: {t}" for t in inst.tests if after.get(t) not in SUCCESS]
        if all(before.get(t) in SUCCESS for t in inst.tests):
            problems.append("every required test already passes before the fix")
        return problems
    for t in inst.fail_to_pass:
        if before.get(t) in SUCCESS:
            problems.append(f"F2P passes before: {t}")
        if after.get(t) not in SUCCESS:
            problems.append(f"F2P {after.get(t, 'not run')} after: {t}")
    for t in inst.pass_to_pass:
        for label, statuses in (("before", before), ("after", after)):
            if statuses.get(t) not in SUCCESS:
                problems.append(f"P2P {statuses.get(t, 'not run')} {label}: {t}")
    return problems


async def validate(
    instances: list[Instance], *, backend: str = "auto", concurrency: int = 2, images: str = "auto"
) -> list[Validation]:
    import tempfile

    from sandbox.sessions.api import SessionLimits

    limits = SessionLimits(exec_timeout_s=300, cpu_s=3600, wall_s=7200, disk_mb=512)
    sem = asyncio.Semaphore(concurrency)

    progress = Progress("validate", len(instances))
    invalid = 0

    async def one(inst: Instance, tmp: Path) -> Validation:
        nonlocal invalid
        async with sem:
            result = await validate_one(inst, limits, backend=backend, tmp=tmp, images=images)
        invalid += not result.ok
        progress.tick(f"{invalid} invalid so far")
        return result

    with tempfile.TemporaryDirectory(prefix="swe-validate-") as tmp:
        return list(await asyncio.gather(*(one(i, Path(tmp)) for i in instances)))


def table(results: list[Validation]) -> str:
    width = max([len(r.instance_id) for r in results] + [11])
    lines = [f"{'instance_id':<{width}}  valid  seconds  problems"]
    for r in results:
        shown = "; ".join(r.problems[:3]) + (" ..." if len(r.problems) > 3 else "")
        lines.append(
            f"{r.instance_id:<{width}}  {'yes' if r.ok else 'NO':<5}  {r.seconds:7.1f}  {shown}"
        )
    bad = sum(not r.ok for r in results)
    lines.append(f"{len(results) - bad}/{len(results)} valid")
    return "\n".join(lines)
