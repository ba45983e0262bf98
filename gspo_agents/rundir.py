"""The run directory: one training owns it at a time, and what is in it stays trustworthy.

- `RunDirLock`: an exclusive `flock` on `RUN_DIR/.lock` holding the owner's pid; a second
  training on the same directory fails at once, naming that pid. The kernel drops the lock when
  the owner dies, however it dies, so a stale lock file never blocks a rerun.
- `plan_start`: resume a run that has a checkpoint (the default), or start over; starting over
  first moves the old run aside (`RUN_DIR.old-<UTC time>`), it never deletes it.
- `write_config`: the resolved config of this training, written only once the command has been
  accepted and the directory locked, so a rejected command changes nothing in an existing run.
- `config_changes`: a resume whose settings differ from the run's saved config is refused,
  naming each difference, unless `trainer.resume_with_changes=true`; then the old config is kept
  beside the new one (`config.before-<UTC time>.yaml`).
- `tee_to_log`: everything the console shows (stdout and stderr) also goes to `RUN_DIR/train.log`.
- `own_run_dir`: all of the above for one training, in that order; the exception that ends the
  training goes into train.log with its traceback.
- `resume_from_checkpoint`: the step a resumed run continues from; `finish_run`: the checkpoint
  and weights of the last completed step; `keep_latest_weights`: one weights export, the latest.

This module knows nothing of models or rollouts; train.py calls it before building either (and
hands the checkpoint functions a learner that can save, load and export).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from gspo_agents.tracking import drop_rows_after

LOCK_FILE = ".lock"
LOG_FILE = "train.log"
CONFIG_FILE = "config.yaml"
CHECKPOINT = "checkpoint"
WEIGHTS = "weights"
RUN_MARKERS = ("metrics.jsonl", CHECKPOINT, f"{CHECKPOINT}.old", f"{CHECKPOINT}.prev", WEIGHTS)


class RunDirError(RuntimeError):
    """The run directory cannot be used: busy, read-only, or not a directory."""


def check_writable(run_dir: Path) -> None:
    """Fail before any work with the directory and the fix, not deep inside a logging handler."""
    probe = run_dir
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise RunDirError(f"trainer.run_dir={run_dir}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunDirError(
            f"trainer.run_dir={run_dir} is not writable ({probe} is read-only for this user); "
            "choose another directory with trainer.run_dir=... or fix its permissions"
        )


class RunDirLock:
    """Exclusive ownership of a run directory by this process (see the module docstring)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # e.g. under /proc or /sys, where access() says yes to root
            raise RunDirError(
                f"trainer.run_dir={self.path.parent} cannot be created ({exc.strerror}); choose "
                "another directory with trainer.run_dir=..."
            ) from exc
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(
                f"trainer.run_dir={self.path.parent} is in use by another training (pid "
                f"{holder}); wait for it to finish, stop it (kill -INT {holder}), or choose "
                "another trainer.run_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


@dataclass(frozen=True, slots=True)
class StartPlan:
    resume: bool  # load RUN_DIR/checkpoint
    moved_to: Path | None  # where an old run was moved before starting over
    message: str


def holds_run(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in RUN_MARKERS)


def has_checkpoint(run_dir: Path) -> bool:
    return any(
        (run_dir / n / "trainer.pt").is_file()
        for n in (CHECKPOINT, f"{CHECKPOINT}.old", f"{CHECKPOINT}.prev")
    )


def plan_start(run_dir: Path, resume: bool) -> StartPlan:
    """Decide how this training starts in `run_dir` (which this process has locked)."""
    if not holds_run(run_dir):
        return StartPlan(False, None, f"new run in {run_dir}")
    if resume and has_checkpoint(run_dir):
        return StartPlan(True, None, f"{run_dir} holds a run: resuming it")
    moved = move_aside(run_dir)
    why = "trainer.resume=false" if resume is False else "it has no checkpoint to resume from"
    return StartPlan(False, moved, f"starting over ({why}); the old run was moved to {moved}")


def move_aside(run_dir: Path) -> Path:
    """Move everything but the lock into a sibling `RUN_DIR.old-<UTC time>`; nothing is deleted."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = run_dir.with_name(f"{run_dir.name}.old-{stamp}-{n}")
    target.mkdir(parents=True)
    for child in run_dir.iterdir():
        if child.name != LOCK_FILE:
            os.replace(child, target / child.name)
    return target


def write_config(path: Path, config: Any) -> None:
    """The resolved config as YAML, replaced atomically."""
    from omegaconf import OmegaConf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(OmegaConf.to_yaml(config, resolve=True), encoding="utf-8")
    os.replace(tmp, path)


# Settings a resumed run may change without being told: how long, how often, where to reach.
RESUME_FREE = frozenset(
    (
        "trainer.steps",
        "trainer.resume",
        "trainer.resume_with_changes",
        "trainer.save_every_steps",
        "trainer.max_failed_steps",
        "trainer.nproc",  # checkpoints reshard to any number of learner processes
        "logger.console_every_steps",
        "logger.wandb_mode",
        "logger.samples_every_steps",
        "logger.samples_per_step",
        "engine.urls",
        "engine.connect_timeout_s",
        "engine.request_timeout_s",
    )
)


def config_changes(saved: Path, config: Any) -> list[str]:
    """`key: old -> new` for every setting of `config` that differs from the run's saved one
    (none when there is no saved config), except RESUME_FREE."""
    import yaml
    from omegaconf import OmegaConf

    if not saved.is_file():
        return []
    old = _flat(yaml.safe_load(saved.read_text(encoding="utf-8")) or {})
    new = _flat(OmegaConf.to_container(config, resolve=True))
    keys = sorted((set(old) | set(new)) - RESUME_FREE)
    missing = "(unset)"
    return [
        f"{k}: {old.get(k, missing)} -> {new.get(k, missing)}"
        for k in keys
        if old.get(k, missing) != new.get(k, missing)
    ]


def keep_old_config(run_dir: Path) -> Path:
    """Move config.yaml aside as config.before-<UTC time>.yaml (never overwritten)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = run_dir / f"config.before-{stamp}.yaml"
    n = 1
    while target.exists():
        n += 1
        target = run_dir / f"config.before-{stamp}-{n}.yaml"
    os.replace(run_dir / CONFIG_FILE, target)
    return target


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _select(config: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(config, key, default=False)


class _Tee:
    """A text stream that writes to the console stream and to the log file."""

    def __init__(self, console: IO[str], log: IO[str]) -> None:
        self._console, self._log = console, log

    def write(self, text: str) -> int:
        self._log.write(text)
        self._log.flush()
        return self._console.write(text)

    def flush(self) -> None:
        self._console.flush()
        self._log.flush()

    def isatty(self) -> bool:
        return self._console.isatty()

    def fileno(self) -> int:
        return self._console.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console, name)


_active_logs: list[IO[str]] = []


class tee_to_log:
    """Context manager: sys.stdout and sys.stderr also append to RUN_DIR/train.log."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOG_FILE

    def __enter__(self) -> tee_to_log:
        self._file = self.path.open("a", encoding="utf-8")
        self._saved = sys.stdout, sys.stderr
        sys.stdout = _Tee(sys.stdout, self._file)
        sys.stderr = _Tee(sys.stderr, self._file)
        _active_logs.append(self._file)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self._saved
        _active_logs.remove(self._file)
        self._file.close()


def log_only(text: str) -> None:
    """Write to the active train.log only (details the console shows elsewhere or in short)."""
    for f in _active_logs[-1:]:
        f.write(text if text.endswith("\n") else text + "\n")
        f.flush()


@contextlib.contextmanager
def own_run_dir(run_dir: Path, resume: bool, config: Any) -> Iterator[bool]:
    """Own the run dir for this training (lock, console log, config); yields whether to resume.

    Nothing is written into the run dir before the lock is held, and an old run is moved aside,
    never deleted, before a training starts over in its place."""
    check_writable(run_dir)
    lock = RunDirLock(run_dir).acquire()
    try:
        plan = plan_start(run_dir, resume)
        changes = config_changes(run_dir / CONFIG_FILE, config) if plan.resume else []
        if changes and not _select(config, "trainer.resume_with_changes"):
            raise RunDirError(
                f"{run_dir} holds a run trained with other settings: {'; '.join(changes)}. "
                "Resume it with the same settings, or keep these and record both configs with "
                "trainer.resume_with_changes=true, or start over with trainer.resume=false, or "
                "choose another trainer.run_dir"
            )
        with tee_to_log(run_dir):
            configure_logging()
            if changes:
                kept = keep_old_config(run_dir)
                print(
                    f"resuming with changed settings ({'; '.join(changes)}); the run's earlier "
                    f"config is kept as {kept}",
                    file=sys.stderr,
                )
            write_config(run_dir / CONFIG_FILE, config)
            print(plan.message, file=sys.stderr, flush=True)
            try:
                yield plan.resume
            except BaseException as exc:  # the reason goes into train.log too, then on up
                log_only("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
                raise
    finally:
        lock.release()


def configure_logging() -> None:
    """Library and module log records go to the console (and so to train.log), INFO and up."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    for noisy in ("httpx", "httpcore", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class Checkpointable(Protocol):
    def load_checkpoint(self, ckpt_dir: str) -> dict: ...
    def save_checkpoint(self, ckpt_dir: str, extra_state: dict) -> None: ...
    def export_hf(self, out_dir: str) -> str: ...


def resume_from_checkpoint(learner: Checkpointable, run_dir: Path) -> int:
    """Load the run's checkpoint (falling back to the one before it if it is unreadable); its
    step's later metric rows go, so each step is logged once."""
    start_step = int(learner.load_checkpoint(str(run_dir / CHECKPOINT)).get("step", 0))
    drop_rows_after(run_dir, start_step)
    print(f"resuming from step {start_step}", file=sys.stderr, flush=True)
    return start_step


def finish_run(learner: Checkpointable, run_dir: Path, step: int) -> None:
    """The checkpoint and exported weights of the last completed step."""
    learner.save_checkpoint(str(run_dir / CHECKPOINT), {"step": step})
    final = run_dir / WEIGHTS / f"step{step}"
    if not final.exists():  # the last step may have had no signal: export what we have
        learner.export_hf(str(final))
        keep_latest_weights(run_dir, final.name)


def keep_latest_weights(run_dir: Path, keep: str) -> None:
    """Remove every exported weights dir in RUN_DIR/weights but `keep`."""
    for child in (run_dir / WEIGHTS).iterdir():
        if child.name != keep:
            shutil.rmtree(child, ignore_errors=True)
