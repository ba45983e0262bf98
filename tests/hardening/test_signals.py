"""F7.7: SIGTERM and SIGKILL of a real `python -m gspo_agents.train` process.

- SIGTERM mid-training: the loop finishes its step, writes a final checkpoint and the weights of
  that step, and the process exits 0; a resume continues from exactly that step.
- SIGKILL mid-training (checkpoint every step): the last complete checkpoint is at most one step
  behind the last logged step, and a resume continues from it, each step logged once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from hd_util import metric_rows, start_train, train, wait_for

from gspo_agents.learner.checkpoint import resolve

pytestmark = [pytest.mark.slow, pytest.mark.timing]

LONG = "trainer.steps=200"  # far more than the test lets it run


def checkpoint_step(run_dir: Path) -> int:
    state = torch.load(resolve(str(run_dir / "checkpoint")) / "trainer.pt", weights_only=False)
    return int(state["extra_state"]["step"])


def _logged(run_dir: Path, at_least: int):
    return lambda: len(metric_rows(run_dir)) >= at_least


@pytest.mark.parametrize("mode", ["sync", "async_rollouts"])
def test_sigterm_writes_a_final_checkpoint_and_exits_cleanly(tmp_path, mode):
    run_dir = tmp_path / "run"
    async_flag = f"trainer.async_rollouts={mode == 'async_rollouts'}"
    proc = start_train(run_dir, LONG, async_flag, log=tmp_path / "train.log")
    try:
        wait_for(_logged(run_dir, 1), 240, "the first training step", proc)
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (tmp_path / "train.log").read_text()
    assert returncode == 0, log[-3000:]
    assert "done:" in log, log[-3000:]
    last = metric_rows(run_dir)[-1]["step"]
    assert 1 <= last < 200
    assert checkpoint_step(run_dir) == last  # the final checkpoint holds the last step
    assert (run_dir / "weights" / f"step{last}" / "config.json").exists()

    resumed = train(run_dir, f"trainer.steps={last + 1}", "trainer.resume=true", async_flag)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in metric_rows(run_dir)] == list(range(1, last + 2))


def test_sigkill_resume_loses_at_most_one_step(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_train(run_dir, LONG, "trainer.save_every_steps=1", log=tmp_path / "train.log")
    try:
        wait_for(_logged(run_dir, 2), 240, "two training steps", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    logged = max(r["step"] for r in metric_rows(run_dir))
    saved = checkpoint_step(run_dir)  # a complete checkpoint, whatever the kill interrupted
    assert logged - 1 <= saved <= logged, (saved, logged)

    resumed = train(run_dir, f"trainer.steps={logged + 1}", "trainer.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # continued from the checkpoint: every step once, the redone ones replacing their old rows
    assert [r["step"] for r in metric_rows(run_dir)] == list(range(1, logged + 2))
    assert checkpoint_step(run_dir) == logged + 1
