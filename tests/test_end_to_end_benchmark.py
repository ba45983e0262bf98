"""`benchmarks/end_to_end.py` keeps its "ours" rows on every env it offers.

Its runs used to stop after three steps without reward spread (`trainer.max_failed_steps`), so
the README's command lost those rows: a benchmark measures the work of a step, not learning. Four
steps here (1 warm-up + 3 timed) on the raw tiny model, whose rewards are all 0, so the old stop
would have ended every run at step 3 and left the table without a row.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))
from sbtest_util import make_sandbox  # noqa: E402

ENVS = ("arithmetic", "codeforces")


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_end_to_end_keeps_both_ours_rows_on_every_env_through_steps_without_spread(tmp_path):
    await make_sandbox("docker").aclose()  # codeforces judges in Docker: fail (CI) or skip here
    out = tmp_path / "e2e.json"
    cmd = [
        sys.executable, "benchmarks/end_to_end.py", "--env", *ENVS, "--runs", "ours", "ours_async",
        "--warmup", "1", "--steps", "3", "--tasks-per-step", "2", "--group-size", "2",
        "--max-new-tokens", "8", "--num-minibatches", "1", "--no-sft", "--json", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1700)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {(side["env"], side["kind"]): side for side in result["sides"]}
    assert set(rows) == {(env, kind) for env in ENVS for kind in ("ours", "ours_async")}
    for side in rows.values():
        assert side["timed_steps"] == 3
        assert side["reward_mean"] == 0.0  # no spread: the steps the old stop counted
        assert side["trained_seqs_per_step"] == 4  # and still the whole batch was trained
