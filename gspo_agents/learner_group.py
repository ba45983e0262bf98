"""Drive N learner processes from one training loop (SPMD under torchrun).

Rank 0 runs the whole training loop (rollouts, environments, logging). The other ranks hold
their FSDP2 shard (and, with rollout.drivers=all_ranks, their share of the driving: see
rollout_ranks.py): they wait for rank 0's next command and execute the same learner call, so every
collective inside `update`, `export_hf` and the checkpoint calls is entered by all ranks in the
same order. Commands travel with `broadcast_object_list`; a batch is a few MB of CPU tensors.

With one process this is a thin pass-through: no broadcasts at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch.distributed as dist

STOP = "stop"


class LearnerGroup:
    """The main rank's handle: each call is broadcast to the followers, then run locally."""

    def __init__(self, learner) -> None:
        self.learner = learner
        self.distributed = (
            dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        )

    @property
    def pad_token_id(self) -> int:
        return self.learner.pad_token_id

    def _call(self, name: str, *args: Any) -> Any:
        if self.distributed:
            dist.broadcast_object_list([(name, args)], src=0)
        return getattr(self.learner, name)(*args)

    def update(self, batch):
        return self._call("update", batch)

    def export_hf(self, out_dir: str) -> str:
        return self._call("export_hf", out_dir)

    def save_checkpoint(self, ckpt_dir: str, extra_state: dict) -> None:
        self._call("save_checkpoint", ckpt_dir, extra_state)

    def load_checkpoint(self, ckpt_dir: str) -> dict:
        return self._call("load_checkpoint", ckpt_dir)

    def close(self) -> None:
        if self.distributed:
            dist.broadcast_object_list([(STOP, ())], src=0)
        self.learner.close()


def follow(learner, rollouts=None) -> None:
    """A follower rank's loop: consumes rank 0's commands until STOP; produces nothing.
    `rollouts` (rollout.drivers=all_ranks): this rank's driver, which takes the "rollout"
    commands (rollout_ranks.FollowerRollouts) and is closed at STOP.

    Ctrl-C reaches every process of the terminal's group; rank 0 decides when to stop (after its
    step and checkpoint, which need this rank), so a follower ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        name, args = box[0]
        if name == STOP:
            try:
                if rollouts is not None:
                    rollouts.close()
            finally:
                learner.close()
            return
        if name == "rollout":
            rollouts.handle(*args)
            continue
        getattr(learner, name)(*args)


RANK0_PIDFILE = "GSPO_AGENTS_RANK0_PIDFILE"


def relaunch_under_torchrun(nproc: int, argv: list[str]) -> int:
    """Re-run this command with `nproc` learner processes; returns torchrun's exit code.

    torchrun runs in its own session, so Ctrl-C in the terminal reaches only this launcher. The
    launcher hands SIGINT and SIGTERM to rank 0 alone, which stops after its step and writes the
    checkpoint with the followers (they need no signal: rank 0 tells them). torchrun itself
    turns a signal into a traceback and a SIGTERM to every worker, so it must not get one.
    Before rank 0 has started (nothing to keep yet) a signal stops the whole group."""
    torchrun = shutil.which("torchrun")
    cmd = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    cmd += ["--standalone", f"--nproc_per_node={nproc}", "-m", "gspo_agents.train", *argv]
    with tempfile.TemporaryDirectory(prefix="gspo-launch-") as tmp:
        pidfile = Path(tmp) / "rank0.pid"
        env = dict(os.environ, GSPO_AGENTS_LAUNCHED="1", **{RANK0_PIDFILE: str(pidfile)})
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_die_with_parent)

        def forward(sig: int, frame: object) -> None:
            try:
                os.kill(int(pidfile.read_text()), sig)
            except (OSError, ValueError):  # rank 0 not started yet, or already gone
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGTERM)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def announce_rank0() -> None:
    """Rank 0 under our launcher: tell it where to send the user's Ctrl-C."""
    path = os.environ.get(RANK0_PIDFILE)
    if path and os.environ.get("RANK") == "0":
        tmp = Path(path).with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        tmp.replace(path)  # the launcher never reads half a pid


def _die_with_parent() -> None:
    """torchrun gets SIGTERM if the launcher dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
