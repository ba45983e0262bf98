"""Host-side grading rules (no sandbox): which statuses count, the runner's records, and how
test_patch is applied over the agent's edits (as SWE-bench applies it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envs.swe.grading import TestRun, graded_tree, judge, parse_records
from envs.swe.instances import load_instances
from envs.swe.repo import PatchError
from tests.envs.test_swe_instances import _built, with_repo

F2P = "tests/test_ops.py::test_clamp_edges"


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swe")
    return load_instances(with_repo("swe_bench", _built(tmp / "minicalc"), tmp))[0]


@pytest.mark.parametrize("status", ["XFAIL", "XPASS", "SKIPPED", "ERROR", None])
def test_a_required_test_that_did_not_run_to_a_pass_does_not_count(status, bench):
    statuses = {t: "PASSED" for t in bench.tests}
    if status is None:
        del statuses[bench.fail_to_pass[0]]
    else:
        statuses[bench.fail_to_pass[0]] = status
    verdict = judge(TestRun(statuses, ""), bench)
    assert not verdict.resolved and verdict.fraction < 1.0
    assert judge(TestRun({t: "PASSED" for t in bench.tests}, ""), bench).resolved


def test_records_need_the_nonce_and_an_end_record_and_tampering_wins():
    nonce = "ab" * 16
    node = F2P.encode().hex()
    good = f"\n{nonce} R {node} call passed 0\n{nonce} E\n"
    assert parse_records(good, nonce) == ({F2P: "PASSED"}, "", True)
    assert parse_records(good.replace(nonce, "cd" * 16), nonce)[0] is None  # another nonce
    assert parse_records(f"{nonce} R {node} call passed 0\n", nonce)[0] is None  # no end
    xfail = f"{nonce} R {node} call skipped 1\n{nonce} E\n"
    assert parse_records(xfail, nonce)[0] == {F2P: "XFAIL"}
    what = b"sys._getframe from pkg/mod.py:3".hex()
    statuses, tampered, _ = parse_records(good + f"{nonce} T {what}\n", nonce)
    verdict = judge(TestRun(statuses, "", tampered=tampered), _one(F2P))
    assert verdict.tampered and verdict.reason == "tampered: sys._getframe from pkg/mod.py:3"


def _one(test: str):
    from envs.swe.instances import parse_instance

    row = {"instance_id": "x__y-1", "patch": "p", "test_patch": "t", "problem_statement": "s"}
    return parse_instance({**row, "FAIL_TO_PASS": [test], "base_commit": "c"})


class _Workspace:
    """The agent's workspace as graded_tree reads it: files of a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def kill_processes(self) -> None:
        pass

    async def read_file(self, path: str, max_bytes: int = 0) -> bytes:
        return (self.root / path.removeprefix("/workspace/repo/")).read_bytes()


def test_test_patch_files_are_reset_to_base_and_a_broken_test_patch_raises(bench, tmp_path):
    from envs.swe.repo import materialize
    from envs.swe.testbed import patch_paths

    helper = "minicalc/ops.py"
    touched = _with_helper_in_test_patch(bench, helper)
    assert helper in patch_paths(touched.test_patch)
    agent = materialize(touched, tmp_path / "agent")
    (agent / helper).write_text((agent / helper).read_text() + "\nAGENT = 1\n")
    tree, notes, changed = asyncio.run(graded_tree(_Workspace(agent), touched, tmp_path / "g"))
    assert "AGENT" not in (tree / helper).read_text() and helper not in changed and not notes
    assert "# graded helper" in (tree / helper).read_text()  # test_patch applied over base
    broken = type(bench)(
        **{
            **_fields(bench),
            "test_patch": touched.test_patch.replace("def clamp", "def clamp_nope"),
        }
    )
    with pytest.raises(PatchError, match="test_patch does not apply"):
        asyncio.run(graded_tree(_Workspace(agent), broken, tmp_path / "g2"))


def _fields(inst) -> dict:
    import dataclasses

    return {f.name: getattr(inst, f.name) for f in dataclasses.fields(inst)}


def _with_helper_in_test_patch(inst, helper: str):
    hunk = (
        f"diff --git a/{helper} b/{helper}\n--- a/{helper}\n+++ b/{helper}\n"
        "@@ -1,2 +1,3 @@\n+# graded helper\n def clamp(x, lo, hi):\n     if x < lo:\n"
    )
    return type(inst)(**{**_fields(inst), "test_patch": inst.test_patch + hunk})
