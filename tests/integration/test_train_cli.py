"""`python -m gspo_agents.train` end to end, as a user runs it: real tiny model, LocalEngine,
learner, JSONL + wandb offline, checkpoint and resume, and two learner processes under torchrun."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_run import TINY_RUN

pytestmark = pytest.mark.slow

FAST = TINY_RUN


def train(run_dir: Path, *overrides: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "gspo_agents.train",
        f"trainer.run_dir={run_dir}",
        *FAST,
        *overrides,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_logs_checkpoints_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    proc = train(run_dir, "trainer.steps=2")
    assert "step 2/2" in proc.stderr  # the console progress line
    first = rows(run_dir)
    assert [r["step"] for r in first] == [1, 2]
    for key in ("loss", "clip_frac_tokens", "ratio_max", "grad_norm", "num_trajectories"):
        assert key in first[0], sorted(first[0])
    assert list((run_dir / "wandb").glob("offline-run-*")), "wandb offline run missing"
    assert (run_dir / "weights" / "step2" / "config.json").exists()
    assert (run_dir / "checkpoint").exists()
    check_samples(run_dir, step=2)  # the last step's samples, by default

    train(run_dir, "trainer.steps=3", "trainer.resume=true")
    resumed = rows(run_dir)
    assert [r["step"] for r in resumed] == [1, 2, 3]  # continued, not restarted
    assert resumed[:2] == first
    assert (run_dir / "weights" / "step3" / "config.json").exists()


def check_samples(run_dir: Path, step: int) -> None:
    """RUN_DIR/samples/step<N>.jsonl holds trajectories as text, and the reader prints them."""
    saved = [json.loads(x) for x in (run_dir / "samples" / f"step{step}.jsonl").open()]
    assert len(saved) == 4  # logger.samples_per_step
    assert len({r["group_id"] for r in saved}) == 2  # one per group first (2 tasks per step)
    for r in saved:
        assert r["step"] == step and "<|im_start|>user" in r["prompt"]
        assert r["turns"][0]["role"] == "model" and isinstance(r["reward"], float)
        assert r["info"]["turn_infos"][0]["turn_reward"] == r["turn_rewards"][0]
    shown = subprocess.run(
        [sys.executable, "-m", "gspo_agents.samples", str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"samples/step{step}.jsonl" in shown and shown.count(f"── step {step} · task") == 4
    assert "[model]" in shown and saved[0]["turns"][0]["text"].rstrip() in shown


def test_two_learner_processes_with_async_rollouts_train_through_torchrun(tmp_path):
    run_dir = tmp_path / "run2"
    train(
        run_dir,
        "trainer.steps=2",
        "trainer.nproc=2",
        "trainer.async_rollouts=true",
        "logger.wandb_mode=disabled",
    )
    got = rows(run_dir)
    assert [r["step"] for r in got] == [1, 2]
    assert all(r["loss"] == r["loss"] for r in got)  # finite, logged once (by rank 0)
