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


def samples(run_dir: Path, step: int) -> list[tuple]:
    """A step's trajectories as text and reward (group ids are random), in a fixed order."""
    saved = [json.loads(x) for x in (run_dir / "samples" / f"step{step}.jsonl").open()]
    return sorted(
        (r["task_id"], r["info"]["sample"], r["prompt"], str(r["turns"]), r["reward"], r["status"])
        for r in saved
    )


def test_two_driving_ranks_with_async_rollouts_train_as_the_one_rank_run(tmp_path):
    """rollout.drivers=all_ranks with a rollout worker process per rank: rank 1 drives half the
    groups (against rank 0's LocalEngine served over loopback), and the run samples what the
    one-rank run samples. Step 1's batch is collected before any update: the same trajectories,
    token for token, and the same rewards. Later batches are prefetched while the previous
    update runs; where the weight update cuts into them is a matter of timing (the request seed
    includes the weight version), in one-rank runs as much as in two-rank ones, so for them the
    test compares what does not depend on it: the same tasks and the same number of
    trajectories per step."""
    common = ["trainer.steps=3", "trainer.async_rollouts=true", "rollout.seed=5"]
    common += ["logger.wandb_mode=disabled", "logger.samples_every_steps=1"]
    common += ["logger.samples_per_step=8"]  # every trajectory (2 tasks x 4 samples)
    train(tmp_path / "one", *common)
    two = ["trainer.nproc=2", "rollout.drivers=all_ranks", "rollout.driver_process=true"]
    train(tmp_path / "two", *common, *two)
    one_rows, two_rows = rows(tmp_path / "one"), rows(tmp_path / "two")
    assert [r["step"] for r in two_rows] == [1, 2, 3]
    assert samples(tmp_path / "two", 1) == samples(tmp_path / "one", 1)
    for key in ("reward_mean", "rollout/turns", "rollout/tokens_mean", "num_tokens"):
        assert two_rows[0][key] == one_rows[0][key], key
    for step in (1, 2, 3):
        tasks = [s[:2] for s in samples(tmp_path / "two", step)]
        assert tasks == [s[:2] for s in samples(tmp_path / "one", step)], step
        assert two_rows[step - 1]["num_trajectories"] == 8
    assert all(r["rollout/error"] == 0 for r in two_rows)
