"""A run people can trust, through real `python -m gspo_agents.train` processes and real signals.

- Ctrl-C (SIGINT) at step k: the step finishes, a checkpoint is written, exit 0; the same command
  run again resumes, printing "resuming from step k"; time_s, the wandb run id and metrics.jsonl
  continue. While it runs, a second training on the same run dir fails at once naming the pid.
- A rejected command changes nothing in an existing run dir; `trainer.resume=false` moves the
  old run aside (never deletes it) before starting over.
- A custom env whose step always raises: the console shows its traceback, the errors column
  counts the failures, train.log holds all of it, and the run stops after
  `trainer.max_failed_steps` steps with a clear message (non-zero exit).
- A corrupt checkpoint file is named and the previous checkpoint used; with none readable the
  run fails in one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import broken_env
import pytest
from hd_util import metric_rows, start_train, train, train_cmd, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timing,
    pytest.mark.timeout(1800),
]  # real trainings; a loaded machine is slow
HERE = Path(__file__).resolve().parent
LONG = "trainer.steps=200"  # far more than the tests let run


def snapshot(run_dir: Path) -> dict[str, str]:
    """Every file under run_dir with a hash of its content."""
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def interrupt_at(proc: subprocess.Popen, run_dir: Path, steps: int) -> int:
    wait_for(lambda: len(metric_rows(run_dir)) >= steps, 600, f"{steps} steps", proc)
    proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=300)


def test_ctrl_c_checkpoints_and_the_same_command_resumes(tmp_path):
    run_dir = tmp_path / "run"
    log1 = tmp_path / "first.log"
    proc = start_train(run_dir, LONG, "logger.wandb_mode=offline", log=log1)
    try:
        wait_for(lambda: len(metric_rows(run_dir)) >= 1, 600, "the first step", proc)
        second = train(run_dir, LONG, "logger.wandb_mode=offline", timeout=120)
        assert second.returncode == 1, second.stderr[-2000:]
        assert f"in use by another training (pid {proc.pid})" in second.stderr
        assert "Traceback" not in second.stderr
        assert interrupt_at(proc, run_dir, 2) == 0, log1.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    out1 = log1.read_text()
    assert "SIGINT: stopping after this step" in out1
    assert "Traceback" not in out1
    k = metric_rows(run_dir)[-1]["step"]
    assert k >= 2
    assert f"stopped after step {k}/200" in out1
    wandb_id = (run_dir / "wandb_run_id").read_text().strip()
    time_k = metric_rows(run_dir)[-1]["time_s"]

    # the same command again: resumes at k (and is stopped again one step later)
    log2 = tmp_path / "second.log"
    proc = start_train(run_dir, LONG, "logger.wandb_mode=offline", log=log2)
    try:
        assert interrupt_at(proc, run_dir, k + 1) == 0, log2.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    out2 = log2.read_text()
    assert f"resuming from step {k}" in out2
    rows = metric_rows(run_dir)
    steps = [r["step"] for r in rows]
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] >= k + 1  # each step once
    assert rows[k]["time_s"] > time_k  # time_s continues, it does not restart at 0
    assert (run_dir / "wandb_run_id").read_text().strip() == wandb_id
    assert len(list((run_dir / "wandb").glob(f"offline-run-*-{wandb_id}"))) == 2
    log_text = (run_dir / "train.log").read_text()
    assert f"resuming from step {k}" in log_text and f"step {k + 1}/200" in log_text

    # a rejected command writes nothing into the run dir
    files = snapshot(run_dir)
    rejected = train(run_dir, LONG, "rollout.num_samples_per_task=1", timeout=120)
    assert rejected.returncode != 0
    assert "rollout.num_samples_per_task=1" in rejected.stderr
    assert snapshot(run_dir) == files

    # resume=false starts over after moving the old run aside
    fresh = train(run_dir, "trainer.steps=1", "trainer.resume=false", timeout=600)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    [moved] = list(tmp_path.glob("run.old-*"))
    assert f"the old run was moved to {moved}" in fresh.stderr
    assert [r["step"] for r in metric_rows(moved)] == steps  # nothing of it lost
    assert [r["step"] for r in metric_rows(run_dir)] == [1]


def env_cmd(run_dir: Path, env_id: str, *overrides: str) -> tuple[list[str], dict[str, str]]:
    """The train command on one of broken_env's envs (registered as a user registers theirs)."""
    broken_env.register()
    boot = "import broken_env; broken_env.register(); from gspo_agents.train import cli; cli()"
    cmd = train_cmd(run_dir, f"env.name={env_id}", *overrides)
    cmd[1:3] = ["-c", boot]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    return cmd, env


def run_with_env(tmp_path: Path, env_id: str, *overrides: str) -> subprocess.CompletedProcess:
    cmd, env = env_cmd(tmp_path / "run", env_id, *overrides)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def test_a_second_ctrl_c_abandons_rollouts_that_never_finish(tmp_path):
    """Step 2's env steps hang forever: the first Ctrl-C cannot end the step, the second abandons
    its rollouts; the checkpoint holds step 1, and the same command resumes from it."""
    run_dir, log, hung = tmp_path / "run", tmp_path / "first.log", tmp_path / "hung"
    cmd, env = env_cmd(run_dir, broken_env.HANGS, LONG)
    # step 1 is 2 tasks x 4 samples = 8 env steps; every later one hangs
    hang = {broken_env.HANG_AFTER: "8", broken_env.HANG_MARKER: str(hung)}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**env, **hang})
    try:
        wait_for(hung.exists, 600, "step 2's first env step (which hangs)", proc)
        proc.send_signal(signal.SIGINT)
        wait_for(
            lambda: "stopping after this step" in log.read_text(), 60, "the first SIGINT", proc
        )
        time.sleep(1)
        assert proc.poll() is None, "the first Ctrl-C must not end a step that has not finished"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    out1 = log.read_text()
    assert "SIGINT: abandoning this step's rollouts" in out1
    assert "abandoned step 2" in out1
    assert "stopped after step 1/200" in out1
    assert "Traceback" not in out1
    assert [r["step"] for r in metric_rows(run_dir)] == [1]

    resumed = subprocess.run(
        cmd[:-1] + ["trainer.steps=2"], capture_output=True, text=True, timeout=600, env=env
    )  # no hang this time
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 1" in resumed.stderr
    assert [r["step"] for r in metric_rows(run_dir)] == [1, 2]


def test_ctrl_c_with_two_learner_processes_stops_cleanly_and_resumes(tmp_path):
    """`trainer.nproc=2`: Ctrl-C in a terminal signals the whole foreground process group. Only
    rank 0 may act on it (torchrun would answer with a traceback and SIGTERM to every worker):
    the step finishes, both ranks write the checkpoint, everything exits 0; the same command
    resumes."""
    run_dir, log = tmp_path / "run", tmp_path / "first.log"
    with log.open("w") as out:  # its own process group, as a terminal's foreground job
        proc = subprocess.Popen(
            train_cmd(run_dir, LONG, "trainer.nproc=2"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: len(metric_rows(run_dir)) >= 2, 600, "2 steps", proc)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out1 = log.read_text()
    k = metric_rows(run_dir)[-1]["step"]
    assert f"stopped after step {k}/200" in out1
    assert "Traceback" not in out1 and "SignalException" not in out1
    assert out1.count("SIGINT: stopping after this step") == 1  # rank 0 alone was told

    again = train(run_dir, "trainer.steps=" + str(k + 1), "trainer.nproc=2", timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from step {k}" in again.stderr
    assert [r["step"] for r in metric_rows(run_dir)] == list(range(1, k + 2))


def test_a_custom_env_that_always_raises_stops_the_run_with_its_traceback(tmp_path):
    proc = run_with_env(
        tmp_path, broken_env.STEP_RAISES, "trainer.steps=20", "trainer.max_failed_steps=2"
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = proc.stderr
    assert "failed with env_exception:ZeroDivisionError" in err
    assert "Traceback (most recent call last)" in err
    assert 'broken_env.py", line' in err and "in grade" in err  # the env's own frame
    assert err.count("Traceback (most recent call last)") == 1  # once, not every step
    assert "errors 8" in err  # the console line's errors column (2 tasks x 4 samples)
    assert "error: stopping at step 2: 2 consecutive steps trained nothing" in err
    assert "step 1 trained nothing: no trajectory finished with a reward: 8/8 failed" in err
    assert "trainer.max_failed_steps" in err
    log = (tmp_path / "run" / "train.log").read_text()
    assert "errors 8" in log and "stopping at step 2" in log
    assert log.count("in grade") == 2  # the first failure's traceback on each failed step


@pytest.mark.parametrize("constant", ["2.0", "-0.5", "0"])
def test_a_constant_reward_env_stops_the_run_saying_why(tmp_path, constant):
    """Every group scores one reward: nothing is learned, every step says so, and the run stops
    with exit 1 after trainer.max_failed_steps such steps (default 3), on the console and in
    train.log. Zero-spread groups are filtered (the default), as a user runs it."""
    proc = run_with_env(
        tmp_path,
        broken_env.CONSTANT,
        f"+env.kwargs.constant={constant}",
        "trainer.steps=20",
        "trainer.max_failed_steps=3",
        "algorithm.filter_zero_spread_groups=true",
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    shown = f"{float(constant):g}"
    why = f"zero reward spread: in every group all samples scored the same (rewards: {shown})"
    for step in (1, 2, 3):
        assert f"step {step} trained nothing: {why}" in proc.stderr
    assert "error: stopping at step 3: 3 consecutive steps trained nothing" in proc.stderr
    assert "Traceback" not in proc.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "stopping at step 3" in log and "step 2 trained nothing" in log
    rows = metric_rows(tmp_path / "run")
    assert [r["trained_nothing"] for r in rows] == [1.0, 1.0, 1.0]
    assert all(r["untrained_reason"].startswith("zero reward spread") for r in rows)
    # every step that trained nothing saved samples to read why
    assert sorted(p.name for p in (tmp_path / "run" / "samples").iterdir()) == [
        "step1.jsonl",
        "step2.jsonl",
        "step3.jsonl",
    ]
    shown = subprocess.run(
        [sys.executable, "-m", "gspo_agents.samples", str(tmp_path / "run"), "--step", "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.count(f"· reward {float(constant)} ·") == 4


def test_initial_messages_returning_a_string_is_named(tmp_path):
    proc = run_with_env(
        tmp_path,
        broken_env.STRING_MESSAGES,
        "trainer.steps=5",
        "trainer.max_failed_steps=1",
        "trainer.sft.enabled=false",
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "StringMessagesEnv.reset (initial_messages) must return a list of chat messages" in (
        proc.stderr
    )
    assert "got str 'What is 1 + 1?'" in proc.stderr


def test_a_corrupt_checkpoint_is_named_and_the_previous_one_used(tmp_path):
    run_dir = tmp_path / "run"
    done = train(run_dir, "trainer.steps=2", "trainer.save_every_steps=1", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / "checkpoint.prev" / "trainer.pt").is_file()  # step 1, kept as fallback
    corrupt = run_dir / "checkpoint" / "trainer.pt"
    corrupt.write_bytes(b"\x00garbage" * 10)

    resumed = train(run_dir, "trainer.steps=3", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"checkpoint file {corrupt} is unreadable" in resumed.stderr
    assert "falling back to the previous checkpoint" in resumed.stderr
    assert "resuming from step 1" in resumed.stderr
    assert [r["step"] for r in metric_rows(run_dir)] == [1, 2, 3]

    for name in ("checkpoint", "checkpoint.prev"):
        (run_dir / name / "trainer.pt").write_bytes(b"not a checkpoint")
    failed = train(run_dir, "trainer.steps=4", timeout=600)
    assert failed.returncode == 1
    assert f"error: no readable checkpoint: checkpoint file {corrupt} is unreadable" in (
        failed.stderr
    )
    assert "trainer.resume=false" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_eval_writes_its_own_config_and_leaves_the_runs_alone(tmp_path):
    run_dir = tmp_path / "run"
    done = train(run_dir, "trainer.steps=1", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    config = (run_dir / "config.yaml").read_text()
    assert f"run_dir: {run_dir}" in config  # the run's resolved config
    cmd = [sys.executable, "-m", "gspo_agents.eval", f"eval.run_dir={run_dir}", "eval.k=2"]
    cmd += ["eval.max_tasks=2", "+env.kwargs.difficulty=1", "rollout.max_new_tokens_per_turn=4"]
    cmd += ["eval.save_samples=true"]
    ev = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    # its completions, every one of the 2 tasks x 2 samples, readable with the samples command
    saved = (run_dir / "eval-test.samples.jsonl").read_text().splitlines()
    assert len(saved) == 4 and all(json.loads(x)["turns"][0]["role"] == "model" for x in saved)
    shown = subprocess.run(
        [sys.executable, "-m", "gspo_agents.samples", str(run_dir / "eval-test.samples.jsonl")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.count("· task ") == 4 and "[model]" in shown
    assert (run_dir / "config.yaml").read_text() == config
    assert "max_new_tokens_per_turn: 4" in (run_dir / "eval-test.config.yaml").read_text()
    assert "eval: 2/2 tasks | eta" in ev.stderr
