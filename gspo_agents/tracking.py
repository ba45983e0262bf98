"""Run tracking: per-step metrics as JSONL in the run directory, wandb, TensorBoard, and a
console line.

The JSONL file is the source of truth (plots and tests read it); wandb mirrors it, offline by
default so nothing leaves the machine unless the user asks (`logger.wandb_mode=online`);
`logger.tensorboard=true` mirrors it as event files in RUN_DIR/tensorboard.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

METRICS_FILE = "metrics.jsonl"


class RunTracker:
    def __init__(
        self,
        run_dir: str | Path,
        *,
        config: dict[str, Any] | None = None,
        wandb_mode: str = "offline",
        wandb_project: str = "gspo-agents",
        run_name: str | None = None,
        total_steps: int | None = None,
        resume: bool = False,
        console_every_steps: int = 1,
        start_step: int = 0,
        tensorboard: bool = False,
    ) -> None:
        """`resume`: continue the run's metrics.jsonl (time_s goes on from its last row) and its
        wandb run (same id); otherwise metrics.jsonl must not exist yet (train.py moves an old
        run aside first; nothing here deletes one)."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        if not resume and self.path.exists():
            raise FileExistsError(
                f"{self.path} exists: resume it (resume=True) or move the old run aside first"
            )
        self.total_steps = total_steps
        self.console_every_steps = max(1, console_every_steps)
        self._time_offset_s = _last_time_s(self.path) if resume else 0.0
        self._file = self.path.open("a", encoding="utf-8")
        self._wandb = None
        if wandb_mode != "disabled":
            run_id = _wandb_run_id(self.run_dir, resume)
            self._wandb = _start_wandb(
                self.run_dir, config, wandb_mode, wandb_project, run_name, run_id
            )
        self._tensorboard = _start_tensorboard(self.run_dir, start_step) if tensorboard else None
        self._start = time.monotonic()  # after wandb's start-up, which is not a training step
        self._progress = Progress(total_steps, done_before=start_step)

    @property
    def wandb_dir(self) -> str | None:
        return None if self._wandb is None else str(self._wandb.dir)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        elapsed_s = self._time_offset_s + time.monotonic() - self._start
        row = {"step": step, "time_s": round(elapsed_s, 3)}
        row.update({k: _jsonable(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._wandb is not None:
            self._wandb.log(
                {k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step
            )
        if self._tensorboard is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._tensorboard.add_scalar(key, value, global_step=step)
            self._tensorboard.flush()

    def console(self, step: int, metrics: dict[str, Any], keys: list[str]) -> None:
        """One line every `console_every_steps` steps (and at the last): the step, time, ETA
        from this session's pace, and `keys` (e.g. the errors column)."""
        eta = self._progress.update(step)
        last = self.total_steps is not None and step >= self.total_steps
        if step % self.console_every_steps and not last:
            return
        total = f"/{self.total_steps}" if self.total_steps else ""
        elapsed = self._time_offset_s + time.monotonic() - self._start
        parts = [f"step {step}{total}", f"{elapsed:6.1f}s", f"eta {eta}"]
        for key in keys:
            if key in metrics and metrics[key] is not None:
                parts.append(f"{key} {_fmt(metrics[key])}")
        print(" | ".join(parts), file=sys.stderr, flush=True)

    def close(self) -> None:
        self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


TENSORBOARD_DIR = "tensorboard"


def _start_tensorboard(run_dir: Path, start_step: int):
    """A SummaryWriter on RUN_DIR/tensorboard; a resumed run drops events after its checkpoint's
    step (purge_step), so a rerun of lost steps does not draw them twice."""
    from torch.utils.tensorboard import SummaryWriter

    purge = start_step + 1 if start_step else None
    return SummaryWriter(str(run_dir / TENSORBOARD_DIR), purge_step=purge)


class Progress:
    """ETA of a loop of `total` units from the pace of the units done in this process (a resumed
    run's earlier steps took place elsewhere in time); "?" until one unit is done."""

    def __init__(
        self, total: int | None, done_before: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.total = total
        self._first = done_before  # units done before this session (a resumed run's steps)
        self._clock = clock
        self._t0 = clock()

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._t0

    def update(self, done: int) -> str:
        """`done` units are finished now; returns the ETA of the rest."""
        if self.total is None or done <= self._first:
            return "?"
        rate_s = self.elapsed_s / (done - self._first)
        return format_duration(rate_s * max(self.total - done, 0))


# A BenchProgress line, so a parent that captures a worker's output can pass these lines on.
BENCH_PROGRESS_LINE = re.compile(r"^  [^|\n]+: \d+(/\d+)? \| \S+ \| eta \S+$")


class BenchProgress:
    """A benchmark's progress line on stderr, `  what: done/total | elapsed | eta 1m05s`, so a
    long run never looks hung; stdout stays for the benchmark's table and RESULT lines.

    Units are whatever the benchmark counts (requests, repeats, table rows); weight them by cost
    (e.g. trajectories rather than rows of different sizes) for an honest ETA. `min_interval_s`
    thins out lines for fast units; the first and the last tick always print, and a tick that
    moves nothing on prints nothing."""

    def __init__(
        self,
        what: str,
        total: int | None,
        *,
        min_interval_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        stream: IO[str] | None = None,
    ) -> None:
        self.what, self.total, self.done = what, total, 0
        self._progress = Progress(total, clock=clock)
        self._min_interval_s, self._last_print_s = min_interval_s, -math.inf
        self._printed_done: int | None = None
        self._stream = stream  # None: sys.stderr at print time (pytest's capsys replaces it)

    def tick(self, done: int | None = None) -> str:
        """`done` units are finished now (default: one more than before); prints the line
        unless it was printed already or one was printed under `min_interval_s` ago; returns it."""
        self.done = self.done + 1 if done is None else done
        line = self.line()
        now = self._progress.elapsed_s
        final = self.total is not None and self.done >= self.total
        due = final or now - self._last_print_s >= self._min_interval_s
        if due and self.done != self._printed_done:
            self._last_print_s, self._printed_done = now, self.done
            print(line, file=self._stream or sys.stderr, flush=True)
        return line

    def line(self) -> str:
        total = "" if self.total is None else f"/{self.total}"
        elapsed = format_duration(self._progress.elapsed_s)
        eta = self._progress.update(self.done)
        return f"  {self.what}: {self.done}{total} | {elapsed} | eta {eta}"


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _last_time_s(path: Path) -> float:
    """time_s of the last complete row of metrics.jsonl (0 when there is none)."""
    if not path.exists():
        return 0.0
    last = 0.0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            last = float(json.loads(line).get("time_s", last))
        except (ValueError, AttributeError):
            continue
    return last


WANDB_ID_FILE = "wandb_run_id"


def _wandb_run_id(run_dir: Path, resume: bool) -> str:
    """The run's wandb id, kept in the run dir, so a resumed run continues the same wandb run."""
    path = run_dir / WANDB_ID_FILE
    if resume and path.exists():
        return path.read_text(encoding="utf-8").strip()
    run_id = uuid.uuid4().hex[:12]
    path.write_text(run_id + "\n", encoding="utf-8")
    return run_id


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"no {METRICS_FILE} in {run_dir}: is it a gspo-agents run directory?"
        )
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def drop_rows_after(run_dir: str | Path, step: int) -> None:
    """A resumed run redoes the steps after its checkpoint; their rows from before the crash go,
    so metrics.jsonl holds each step once."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if _row_step(ln) <= step]
    if len(kept) != len(lines):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, path)


def _row_step(line: str) -> float:
    try:
        return float(json.loads(line).get("step", 0))
    except (ValueError, AttributeError):  # a line torn by a kill mid-write
        return float("inf")


WandbMode = Literal["online", "offline", "disabled"]
WANDB_MODES: tuple[WandbMode, ...] = ("online", "offline", "disabled")


def _wandb_mode(mode: str) -> WandbMode:
    for valid in WANDB_MODES:
        if mode == valid:
            return valid
    raise ValueError(f"wandb_mode={mode!r} is not valid; choose one of {', '.join(WANDB_MODES)}")


def _start_wandb(
    run_dir: Path, config, mode: str, project: str, name: str | None, run_id: str | None = None
):
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    return wandb.init(
        project=project,
        name=name,
        id=run_id,
        resume="allow" if run_id else None,
        dir=str(run_dir),
        mode=_wandb_mode(mode),
        config=config or {},
        reinit="finish_previous",
    )


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
