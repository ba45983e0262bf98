"""F7.6: the checkpoint directory fills up or becomes unwritable during a save.

Real faults, as root: a tiny tmpfs that a filler file has (almost) filled, and a read-only bind
mount. What must hold: the save raises CheckpointError naming the directory and the cause, the
previous checkpoint stays complete and loads with the exact weights it had, the partial
`<dir>.tmp` is removed, and the next save after the fault is fixed succeeds. The train CLI
test checks the whole path: the run fails with that error and a resume continues from the last
good step.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hd_util import metric_rows, need, train

from gspo_agents.learner import CheckpointError, Learner, LearnerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dist"))
from tiny import build_tiny_model, synthetic_batch, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(algorithm="gspo", lr=3e-3, num_minibatches=1, micro_batch_tokens=512)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def tmpfs(tmp_path):
    """A fresh 64 MiB tmpfs, unmounted afterwards even if the test fails."""
    need(os.geteuid() == 0, "mounting a tmpfs needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt))
    except subprocess.CalledProcessError as exc:
        need(False, f"cannot mount a tmpfs here: {exc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(directory: Path, leave_bytes: int) -> Path:
    """Write a filler file until the filesystem is full, then give back `leave_bytes`."""
    filler = directory / "filler"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave_bytes))
    return filler


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def _trained(model_dir: str) -> Learner:
    learner = Learner(model_dir, replace(CFG))
    batch = synthetic_batch(3)
    learner.update(with_old_logprobs(batch, learner.compute_logprobs(batch)))
    assert learner.step == 1
    return learner


def _weights(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in learner.model.state_dict().items()}


def _assert_resumes_from(ckpt: Path, model_dir: str, weights: dict, step: int) -> None:
    fresh = Learner(model_dir, replace(CFG))
    assert fresh.load_checkpoint(str(ckpt)) == {"step": step}
    assert fresh.step == step
    for k, v in _weights(fresh).items():
        torch.testing.assert_close(v, weights[k], rtol=0, atol=0, msg=k)
    fresh.close()


def test_disk_full_during_save_keeps_the_previous_checkpoint(tmpfs, model_dir):
    learner = _trained(model_dir)
    ckpt = tmpfs / "checkpoint"
    learner.save_checkpoint(str(ckpt), {"step": 1})
    good = _weights(learner)

    batch = synthetic_batch(4)
    learner.update(with_old_logprobs(batch, learner.compute_logprobs(batch)))
    size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
    filler = fill(tmpfs, leave_bytes=size // 2)  # room for a part of the save, not all of it
    with pytest.raises(CheckpointError) as caught:
        learner.save_checkpoint(str(ckpt), {"step": 2})
    message = str(caught.value)
    # torch reports a full disk as "unexpected pos", so the message adds the free space
    assert str(ckpt) in message and "MiB free on that filesystem" in message, message
    assert len(message) < 1500, message  # one readable line, not DCP's nested traceback
    assert not (tmpfs / "checkpoint.tmp").exists()  # the partial save gave its space back
    _assert_resumes_from(ckpt, model_dir, good, step=1)

    filler.unlink()  # the operator frees space: the next save works and replaces the old one
    learner.save_checkpoint(str(ckpt), {"step": 2})
    _assert_resumes_from(ckpt, model_dir, _weights(learner), step=2)
    learner.close()


def test_read_only_checkpoint_directory_keeps_the_previous_checkpoint(tmpfs, model_dir):
    learner = _trained(model_dir)
    ckpt = tmpfs / "checkpoint"
    learner.save_checkpoint(str(ckpt), {"step": 1})
    good = _weights(learner)
    batch = synthetic_batch(5)
    learner.update(with_old_logprobs(batch, learner.compute_logprobs(batch)))

    _mount("-o", "remount,ro", str(tmpfs))
    try:
        with pytest.raises(CheckpointError) as caught:
            learner.save_checkpoint(str(ckpt), {"step": 2})
        assert "Read-only file system" in str(caught.value), caught.value
        _assert_resumes_from(ckpt, model_dir, good, step=1)
    finally:
        _mount("-o", "remount,rw", str(tmpfs))
    learner.save_checkpoint(str(ckpt), {"step": 2})
    _assert_resumes_from(ckpt, model_dir, _weights(learner), step=2)
    learner.close()


def test_disk_full_during_weight_export_keeps_the_previous_export(tmpfs, model_dir):
    from safetensors.torch import load_file

    learner = _trained(model_dir)
    first = Path(learner.export_hf(str(tmpfs / "weights" / "step1")))
    size = sum(f.stat().st_size for f in first.iterdir())
    filler = fill(tmpfs, leave_bytes=size // 2)
    with pytest.raises(CheckpointError) as caught:
        learner.export_hf(str(tmpfs / "weights" / "step2"))
    assert "could not export the HF weights" in str(caught.value)
    assert "MiB free on that filesystem" in str(caught.value)
    assert not (tmpfs / "weights" / "step2").exists()
    assert not (tmpfs / "weights" / "step2.tmp").exists()
    assert load_file(str(first / "model.safetensors"))  # the previous export is whole
    filler.unlink()
    assert Path(learner.export_hf(str(tmpfs / "weights" / "step2"))).is_dir()
    learner.close()


@pytest.mark.slow
def test_train_cli_disk_full_reports_and_resume_uses_the_last_good_checkpoint(tmpfs):
    run_dir = tmpfs / "run"
    first = train(run_dir, "trainer.steps=2", "trainer.save_every_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert [r["step"] for r in metric_rows(run_dir)] == [1, 2]

    # Room for the weight exports (~4 MB each) of the resumed run, not for a ~12 MB checkpoint.
    filler = fill(tmpfs, leave_bytes=9 << 20)
    failed = train(run_dir, "trainer.steps=4", "trainer.save_every_steps=1", "trainer.resume=true")
    assert failed.returncode != 0
    assert "could not save the checkpoint" in failed.stderr, failed.stderr[-3000:]
    assert "MiB free on that filesystem" in failed.stderr
    assert not (run_dir / "checkpoint.tmp").exists()
    assert [r["step"] for r in metric_rows(run_dir)] == [1, 2, 3]  # step 3 ran, then the save

    filler.unlink()
    resumed = train(run_dir, "trainer.steps=4", "trainer.save_every_steps=1", "trainer.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # step 3 redone from step 2's state; its row from the failed run replaced, not duplicated
    assert [r["step"] for r in metric_rows(run_dir)] == [1, 2, 3, 4]


@pytest.mark.slow
def test_failed_save_under_fsdp2_fails_on_every_rank_without_hanging(tmpfs, model_dir):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dist"))
    from launch import torchrun

    script = Path(__file__).resolve().parent / "dist_ckpt_fault.py"
    out = torchrun(str(script), model_dir, str(tmpfs), nproc=2, timeout_s=240)
    for rank in (0, 1):
        assert f"rank {rank}: CheckpointError: could not save the checkpoint" in out, out
        assert f"rank {rank}: saved again, step 2" in out, out
    assert "read-only filesystem?!" not in out
