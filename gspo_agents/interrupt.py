"""Ctrl-C and SIGTERM during training: stop at a step boundary, keep the work.

- The first SIGINT or SIGTERM asks the loop to stop after the current step; the step finishes,
  a checkpoint is written, and rerunning the same command resumes from it.
- A second one abandons the current step if it is still collecting rollouts (its trajectories
  are dropped; the checkpoint holds the last completed step). An optimizer update in progress is
  never abandoned half-way: the checkpoint would hold a model no step produced.
- Further ones say that the checkpoint is being written (SIGKILL exits without one).
- `say_stopped`: after a stop before the last step, where the checkpoint is and how to resume.

Used by train.py's loop only; everything before the loop (model build, cold start) ends on
Ctrl-C with KeyboardInterrupt, which the CLI reports in one line.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StepAbandoned(Exception):
    """The current step's rollouts were cancelled by a second interrupt."""


class StopSignals:
    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.received = 0
        self._collecting: asyncio.Future | None = None

    def __enter__(self) -> StopSignals:
        self._loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            self._loop.add_signal_handler(sig, self._on_signal, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in SIGNALS:
            self._loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        self.received += 1
        name = signal.Signals(sig).name
        if self.received == 1:
            self.stop.set()
            _say(f"{name}: stopping after this step and writing a checkpoint (again: abandon it)")
        elif self._collecting is not None and not self._collecting.done():
            _say(f"{name}: abandoning this step's rollouts; the checkpoint keeps the last step")
            self._collecting.cancel()
        else:
            _say(
                f"{name}: finishing this step's update (never abandoned half-way), then the "
                "checkpoint; SIGKILL exits without one"
            )

    async def collecting(self, rollouts: Awaitable[T]) -> T:
        """Await a step's rollout collection, which a second signal may abandon."""
        future = asyncio.ensure_future(rollouts)
        self._collecting = future
        try:
            return await future
        except asyncio.CancelledError:
            if future.cancelled() and self.received >= 2:
                raise StepAbandoned from None
            raise
        finally:
            self._collecting = None


def say_stopped(step: int, steps: int, checkpoint: Path) -> None:
    print(
        f"stopped after step {step}/{steps}; checkpoint {checkpoint}. "
        "Run the same command again to resume.",
        file=sys.stderr,
        flush=True,
    )


def _say(message: str) -> None:
    print(f"\n{message}", file=sys.stderr, flush=True)
