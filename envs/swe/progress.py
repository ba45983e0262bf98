"""A progress line on stderr for the long SWE commands (`validate`, `agents`): every tenth of
the work and at the end, with the elapsed time and an estimate of what is left."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, total: int, *, stream=None, every: int | None = None):
        self.label, self.total, self.done = label, total, 0
        self.every = every or max(1, total // 10)
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()

    def tick(self, note: str = "") -> None:
        self.done += 1
        if self.done % self.every and self.done != self.total:
            return
        spent = time.monotonic() - self.start
        left = spent / self.done * (self.total - self.done)
        extra = f", {note}" if note else ""
        print(
            f"{self.label}: {self.done}/{self.total} done in {spent / 60:.1f} min"
            f" (~{left / 60:.1f} min left){extra}",
            file=self.stream,
            flush=True,
        )
