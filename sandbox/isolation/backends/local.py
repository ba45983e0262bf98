"""unsafe-local backend: the runner as a plain host subprocess. NO ISOLATION AT ALL.

The program can read and write your files, use the network, see your environment and outlive the
run if it tries. It exists for trusted code on machines with no sandbox (and as the benchmark's
floor); Sandbox.create only builds it with allow_unsafe_local=True, and logs a warning.
"""

from __future__ import annotations

import sys
import tempfile

from sandbox.isolation.backends.base import RUNNER_SOURCE, ProcessBackend


class UnsafeLocalBackend(ProcessBackend):
    name = "unsafe-local"
    kill_all = False  # kill(-1) here would kill every process of the calling user
    nproc_margin = 0  # 0 = no RLIMIT_NPROC: it would count all of the user's processes
    seccomp = False  # no isolation to protect here

    def __init__(self, slots: int) -> None:
        super().__init__(slots, cgroups=False)
        self.scratch_parent = tempfile.gettempdir()

    def check(self) -> None:
        return None

    def argv(self, slot: int) -> list[str]:
        return [sys.executable, "-S", "-c", RUNNER_SOURCE]
