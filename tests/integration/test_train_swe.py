"""`python -m gspo_agents.train env=swe` (README, "SWE-style tasks") shortened to two steps: the
cold start on whole multi-turn reference turns that the rollouts could produce, rollouts in
bubblewrap sessions on the shipped instances, every trajectory graded by the repository's tests,
per-step resolved/tests-pass means in metrics.jsonl. The full command's numbers are in the README;
this checks the same path in CI time (the sizing, not the learning)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_the_swe_run_cold_starts_on_whole_turns_and_grades_every_episode(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "gspo_agents.train",
        "env=swe",
        f"trainer.run_dir={run_dir}",
        "trainer.steps=2",
        "trainer.tasks_per_step=1",
        "rollout.num_samples_per_task=2",
        "trainer.sft.steps=2",
        "trainer.sft.batch_size=2",
        "trainer.sft.max_examples=3",  # 3 tasks: 9 turns (view, edit, submit)
        "logger.wandb_mode=disabled",
        "logger.samples_every_steps=1",  # every trajectory (2 a step) in samples/
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # configs/env/swe.yaml's budgets fit every reference turn: no note says they would be cut
    assert "reference turns are up to" not in proc.stderr, proc.stderr[-4000:]
    assert "cold start: 9 examples from 3 tasks, whole turns" in proc.stderr, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["rollout/error"] == 0 and r["rollout/truncated_by_prompt"] == 0, r
        assert "rollout/env/resolved" in r and "rollout/env/tests_pass_frac" in r, sorted(r)
    graded = []
    for path in sorted((run_dir / "samples").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            last = json.loads(line)["info"]["turn_infos"][-1]
            graded.append(last["grade_reason"])
    assert len(graded) == 4 and "not graded" not in graded, graded
