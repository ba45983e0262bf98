"""Waits that scale with the machine, for tests that wait on CPU-bound work in other processes.

A fixed 60 s wait holds on an idle laptop and fails on a 2-core CI box running four other jobs.
`patience(s)` is `s` on an idle machine, times the run queue per core (the 1-minute load average
over the core count, at least 1), times `GSPO_TEST_PATIENCE` (a factor, default 1) for machines
slower than the load shows. It only bounds how long a test waits for something that should
happen; it never makes a test pass that would otherwise fail.
"""

from __future__ import annotations

import os


def load_factor() -> float:
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def patience(seconds: float) -> float:
    return seconds * load_factor() * float(os.environ.get("GSPO_TEST_PATIENCE", "1"))
