"""The run directory and the run's console/metrics bookkeeping, without training.

Real processes and files: a lock held by another real process, a run moved aside (and never
deleted), the console line's cadence, ETA and errors column, time_s continuing on resume.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gspo_agents import rundir
from gspo_agents.tracking import Progress, RunTracker, format_duration

HOLD = (
    "import sys, time; from pathlib import Path; from gspo_agents.rundir import RunDirLock; "
    "RunDirLock(Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(60)"
)


def test_a_locked_run_dir_names_the_holders_pid(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(
            rundir.RunDirError, match=rf"in use by another training \(pid {holder.pid}\)"
        ):
            rundir.RunDirLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    rundir.RunDirLock(tmp_path).acquire().release()  # the kernel dropped the dead holder's lock


def test_starting_over_moves_the_old_run_aside(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "trainer.pt").write_text("x")
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    assert rundir.plan_start(run_dir, resume=True).resume
    plan = rundir.plan_start(run_dir, resume=False)
    assert not plan.resume and plan.moved_to is not None
    assert (plan.moved_to / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert (plan.moved_to / "checkpoint" / "trainer.pt").exists()
    assert not rundir.holds_run(run_dir)


def test_a_run_without_a_checkpoint_is_moved_aside_not_resumed(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')  # killed before its 1st checkpoint
    plan = rundir.plan_start(run_dir, resume=True)
    assert not plan.resume and "no checkpoint" in plan.message
    assert (plan.moved_to / "metrics.jsonl").exists()


def test_a_new_dir_is_a_new_run(tmp_path):
    plan = rundir.plan_start(tmp_path / "nothing-here", resume=True)
    assert not plan.resume and plan.moved_to is None


def test_console_every_n_steps_with_eta_and_errors(tmp_path, capsys):
    tracker = RunTracker(tmp_path, wandb_mode="disabled", total_steps=5, console_every_steps=2)
    for step in range(1, 6):
        tracker.log(step, {"errors": step % 2})
        tracker.console(step, {"errors": step % 2}, ["errors"])
    tracker.close()
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(" |")[0] for ln in lines] == ["step 2/5", "step 4/5", "step 5/5"]
    assert "| eta " in lines[0] and "| errors 0" in lines[0]


def test_time_s_continues_when_a_run_resumes(tmp_path):
    first = RunTracker(tmp_path, wandb_mode="disabled", total_steps=3)
    first.log(1, {})
    first.close()
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "time_s": 100.0}\n')
    with pytest.raises(FileExistsError):
        RunTracker(tmp_path, wandb_mode="disabled", total_steps=3)  # never silently deleted
    resumed = RunTracker(tmp_path, wandb_mode="disabled", total_steps=3, resume=True, start_step=1)
    resumed.log(2, {})
    resumed.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["time_s"] >= 100.0


def test_progress_eta_from_this_sessions_pace():
    progress = Progress(total=10, done_before=4)
    time.sleep(0.05)
    eta = progress.update(5)  # one unit in ~0.05 s, five left
    assert eta in ("0s", "1s")
    assert Progress(total=10).update(0) == "?"
    assert format_duration(59) == "59s"
    assert format_duration(61) == "1m01s"
    assert format_duration(3700) == "1h01m"


def test_tee_puts_everything_the_console_shows_into_train_log(tmp_path, capsys):
    with rundir.tee_to_log(tmp_path):
        print("to stdout")
        print("to stderr", file=sys.stderr)
        rundir.log_only("only in the log")
    out = capsys.readouterr()
    assert "to stdout" in out.out and "to stderr" in out.err and "only in" not in out.err
    log = Path(tmp_path / "train.log").read_text()
    assert log.splitlines() == ["to stdout", "to stderr", "only in the log"]


def test_a_read_only_run_dir_is_named_with_the_fix(tmp_path):
    """A real read-only filesystem (a tmpfs mounted ro), not a permission bit root ignores."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)], check=True)
    try:
        with pytest.raises(rundir.RunDirError, match="is not writable") as info:
            rundir.check_writable(mnt / "runs" / "x")
        assert "trainer.run_dir=" in str(info.value)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _config(*overrides: str):
    from hydra import compose, initialize_config_dir

    from gspo_agents.config import CONFIG_DIR, register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def _finished_run(run_dir: Path, *overrides: str) -> None:
    """A run dir as a finished training leaves it: its config and a checkpoint."""
    with rundir.own_run_dir(run_dir, True, _config(*overrides)):
        pass
    (run_dir / "checkpoint").mkdir()
    (run_dir / "checkpoint" / "trainer.pt").write_bytes(b"x")


def test_a_resume_with_changed_settings_names_them_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    _finished_run(run_dir, "trainer.lr=0.001", "trainer.steps=5")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    changed = _config("trainer.lr=0.002", "+env.kwargs.difficulty=2", "trainer.steps=9")
    with pytest.raises(rundir.RunDirError) as err:
        with rundir.own_run_dir(run_dir, True, changed):
            pytest.fail("a changed resume must not start")
    message = str(err.value)
    assert "trainer.lr: 0.001 -> 0.002" in message
    assert "env.kwargs.difficulty: (unset) -> 2" in message
    assert "trainer.steps" not in message  # extending a run is not a change of settings
    assert "trainer.resume_with_changes=true" in message and "trainer.resume=false" in message
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_a_resume_with_the_same_settings_or_more_steps_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    _finished_run(run_dir, "trainer.steps=5")
    with rundir.own_run_dir(run_dir, True, _config("trainer.steps=9")) as resume:
        assert resume
    assert not list(run_dir.glob("config.before-*"))


def test_an_explicit_override_resumes_and_keeps_both_configs(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _finished_run(run_dir, "trainer.lr=0.001")
    changed = _config("trainer.lr=0.002", "trainer.resume_with_changes=true")
    with rundir.own_run_dir(run_dir, True, changed) as resume:
        assert resume
    [old] = run_dir.glob("config.before-*.yaml")
    assert "lr: 0.001" in old.read_text() and "lr: 0.002" in (run_dir / "config.yaml").read_text()
    err = capsys.readouterr().err
    assert "resuming with changed settings (trainer.lr: 0.001 -> 0.002" in err and old.name in err
