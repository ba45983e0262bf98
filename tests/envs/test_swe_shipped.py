"""The shipped SWE task set (envs/swe/data): real projects, injected bugs, user-style issues.

CI validates a seeded handful in the sandbox (the whole set takes minutes per instance pair on a
loaded 2-core machine; `python -m envs.swe validate envs/swe/data/instances.jsonl` runs it all)
and plays the oracle (the gold patch through the tools) and the null agent on two of them, and
every scripted agent of `python -m envs.swe agents` (envs/swe/agents.py) on two.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envs.swe.agents import AGENTS, Play, changed_lines, stub_edits, summary
from envs.swe.archives import cache_root
from envs.swe.env import DEFAULT_SOURCE, reference_calls
from envs.swe.instances import load_instances
from tests.envs.test_swe_env import _episode, call

PATH = Path(DEFAULT_SOURCE.removeprefix("swe:"))
INSTANCES = load_instances(PATH)
SAMPLE = random.Random(0).sample(INSTANCES, 3)


def test_the_set_spans_real_projects_with_licences_and_clean_issue_texts():
    projects = {i.repo for i in INSTANCES}
    assert len(projects) >= 5, projects
    assert len(INSTANCES) >= 100, len(INSTANCES)
    assert len({i.bug_patch for i in INSTANCES}) == len(INSTANCES), "two rows inject the same bug"
    for inst in INSTANCES:
        repo = Path(inst.repo_path)
        assert any(repo.glob("LICENSE*")), repo
        assert inst.bug_patch and inst.fail_to_pass and inst.test_files
        text = inst.problem_statement
        assert "::" not in text and "test_" not in text and "@@" not in text, inst.instance_id
        assert not any(line.startswith(("+", "-")) for line in text.splitlines())
    counts = {p: sum(i.repo == p for i in INSTANCES) for p in projects}
    assert min(counts.values()) >= 5, counts
    size = sum(f.stat().st_size for f in PATH.parent.rglob("*") if f.is_file())
    assert size < 5 << 20, f"the shipped data is {size >> 20} MiB"
    # the projects ship as their sdists, unpacked on use: no other project's source in this tree
    assert not list(PATH.parent.rglob("*.py")), "a vendored source file under envs/swe/data"
    assert {Path(i.repo_path).parents[1] for i in INSTANCES} == {cache_root()}


def test_a_seeded_handful_passes_gold_validation_in_the_sandbox():
    ids = [i.instance_id for i in SAMPLE]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "envs.swe",
            "validate",
            str(PATH),
            "--backend",
            "bubblewrap",
            "--only",
            *ids,
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"3/3 valid", out.stdout)


@pytest.mark.parametrize("inst", SAMPLE[:2], ids=lambda i: i.instance_id)
def test_oracle_resolves_and_null_agent_does_not(inst, tmp_path):
    one = tmp_path / "one.jsonl"
    rows = [line for line in PATH.read_text().splitlines() if f'"{inst.instance_id}"' in line]
    one.write_text(
        rows[0].replace('"repo_path": "repos/', f'"repo_path": "{PATH.parent}/repos/') + "\n"
    )
    reward, info = asyncio.run(_episode(one, "bubblewrap", [reference_calls(inst)]))
    assert reward == 1.0, info
    reward, info = asyncio.run(_episode(one, "bubblewrap", [call("submit")]))
    assert reward == 0.0 and info["grade_reason"], info


def test_agents_cli_resolves_only_with_the_oracle_on_a_seeded_pair():
    if shutil.which("bwrap") is None and os.environ.get("CI", "").lower() != "true":
        pytest.skip("bubblewrap is not installed (under CI=true this fails)")
    ids = [i.instance_id for i in SAMPLE[:2]]
    out = subprocess.run(
        [sys.executable, "-m", "envs.swe", "agents", str(PATH), "--backend", "bubblewrap"]
        + ["--only", *ids],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(tuple(ids))]
    assert sorted((r[0], r[1]) for r in rows) == sorted((i, a) for i in ids for a in AGENTS)
    assert all(r[2] == ("1" if r[1] == "oracle" else "0") for r in rows), out.stdout
    for agent in AGENTS:
        want = "2/2" if agent == "oracle" else "0/2"
        assert f"{agent}: resolved {want}, errors 0, tampered 0 (want {want}) ok" in out.stdout


SOURCE = """\
def outer(x):
    def inner(y):
        return y + 1
    if x:
        return 0
    return inner(x)


class K:
    @property
    def value(self): return 42
"""


def test_stub_edits_replace_the_innermost_enclosing_function_body():
    assert changed_lines("+++ b/m.py\n@@ -3,2 +3,2 @@\n x\n-a\n+b\n") == {"m.py": [4]}
    [(old, new)] = stub_edits(SOURCE, [3], None)
    assert old == "    def inner(y):\n        return y + 1\n"
    assert new == "    def inner(y):\n        return None\n"
    [(old, new)] = stub_edits(SOURCE, [3, 5], "pass")  # inner is inside outer: one edit
    assert old.startswith("def outer") and new == "def outer(x):\n    pass\n"
    [(_, new)] = stub_edits(SOURCE, [5], None)
    assert new == "def outer(x):\n    return 0\n"  # the first constant it returns
    [(old, new)] = stub_edits(SOURCE, [11], None)
    assert new == "    def value(self): return 42\n" and old == new
    assert stub_edits(SOURCE, [8], None) == []  # between functions: nothing to stub


def test_summary_fails_when_a_stub_resolves_or_an_episode_errs():
    good = [Play("a", "oracle", 1.0, "resolved", 1.0), Play("a", "null", 0.0, "1/2 fail", 1.0)]
    assert summary(good, ["oracle", "null"])[1]
    for bad in (
        [good[0], Play("a", "null", 1.0, "resolved", 1.0)],
        [good[0], Play("a", "null", None, "InfraError: sandbox died", 1.0)],
        [Play("a", "oracle", 0.0, "1/2 fail", 1.0), good[1]],
    ):
        text, ok = summary(bad, ["oracle", "null"])
        assert not ok and "FAILED" in text
    assert "ERROR" in summary([good[0], Play("a", "null", None, "x", 1.0)], ["null"])[0]
