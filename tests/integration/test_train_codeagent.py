"""`python -m gspo_agents.train env=codeagent` end to end for two steps: the tiny-agent model, tool
prompts, one sandbox session per trajectory (bubblewrap), tool metrics in metrics.jsonl, a clean
exit (session pools closed at shutdown)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_codeagent_run_logs_tool_metrics(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "gspo_agents.train",
        "env=codeagent",
        f"trainer.run_dir={run_dir}",
        "trainer.steps=2",
        "trainer.tasks_per_step=1",
        "rollout.num_samples_per_task=2",
        "rollout.max_new_tokens_per_turn=32",
        "trainer.sft.steps=2",
        "trainer.sft.batch_size=2",
        "algorithm.filter_zero_spread_groups=false",
        "logger.wandb_mode=disabled",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in (
        "rollout/env/tool_call_attempts",
        "rollout/env/tool_calls",
        "rollout/num_turns_mean",
    ):
        assert key in rows[0], sorted(rows[0])
    # the parsed share is logged only for steps whose episodes attempted a call
    for row in rows:
        attempted = row["rollout/env/tool_call_attempts"] > 0
        assert ("rollout/env/parse_ok_frac" in row) == attempted, sorted(row)
    assert rows[0]["rollout/error"] == 0  # sessions started and closed; no infra errors
