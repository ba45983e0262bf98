"""Run tracking: per-step metrics as JSONL in the run directory, wandb, and a console line.

The JSONL file is the source of truth (plots and tests read it); wandb mirrors it, offline by
default so nothing leaves the machine unless the user asks (`logger.wandb_mode=online`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Literal

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
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        if not resume and self.path.exists():
            self.path.unlink()
        self.total_steps = total_steps
        self._start = time.monotonic()
        self._file = self.path.open("a", encoding="utf-8")
        self._wandb = None
        if wandb_mode != "disabled":
            self._wandb = _start_wandb(self.run_dir, config, wandb_mode, wandb_project, run_name)

    @property
    def wandb_dir(self) -> str | None:
        return None if self._wandb is None else str(self._wandb.dir)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, "time_s": round(time.monotonic() - self._start, 3)}
        row.update({k: _jsonable(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._wandb is not None:
            self._wandb.log(
                {k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step
            )

    def console(self, step: int, metrics: dict[str, Any], keys: list[str]) -> None:
        total = f"/{self.total_steps}" if self.total_steps else ""
        elapsed = time.monotonic() - self._start
        parts = [f"step {step}{total}", f"{elapsed:6.1f}s"]
        for key in keys:
            if key in metrics and metrics[key] is not None:
                parts.append(f"{key} {_fmt(metrics[key])}")
        print(" | ".join(parts), file=sys.stderr, flush=True)

    def close(self) -> None:
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


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


def _start_wandb(run_dir: Path, config, mode: str, project: str, name: str | None):
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    return wandb.init(
        project=project,
        name=name,
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
