"""The shipped SWE task set (envs/swe/data): real projects, injected bugs, user-style issues.

CI validates a seeded handful in the sandbox (the whole set takes minutes per instance pair on a
loaded 2-core machine; `python -m envs.swe validate envs/swe/data/instances.jsonl` runs it all)
and plays the oracle (the gold patch through the tools) and the null agent on two of them.
"""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
