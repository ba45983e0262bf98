"""Sandboxed execution and judging of untrusted, model-generated programs (Python 3, C++17).

    async with Sandbox.create() as sb:            # backend="auto": the strongest available
        result = await sb.run(Program("python", src), [TestCase("1 2\\n", "3")], Limits(time_s=1))

Function-style results (sandbox.judging.functional: HumanEval, LeetCode) cannot be forged by the
submission: a trusted harness process that never runs submitted code holds the result channel
and the expected values (sandbox/judging/fnharness.py; tests/sandbox/test_function_forgery.py).

What it protects against (each item has an adversarial test in tests/sandbox, run on every
backend): fork bombs (process limits of the whole tree), memory bombs (resident memory of the
whole tree, cgroups), CPU hogs and sleepers (CPU time of the whole tree and wall time limits), output floods (capped stdout, capped scratch
tmpfs), network access (a private network namespace with only loopback), reading host files (a
minimal read-only root; the project, /root and host temp dirs are not there), writing outside the
per-run scratch directory, host environment variables (cleared), signalling or outliving the
supervisor (pid namespaces; leftover processes are killed after every test), privilege (an
unprivileged uid, no capabilities, no-new-privileges, a seccomp filter), runs reaching each
other (no file, IPC object, keyring or process of one run is visible to the next on the same
slot; see sandbox/README.md, "Integrity"), and seeing the expected output (judging happens on
the host; the answer never enters the program's sandbox).

What it does NOT protect against: kernel vulnerabilities (all backends share the host kernel;
use gVisor/Kata/VMs if your threat model includes kernel exploits), side channels and timing
attacks, denial of service through shared hardware (CPU caches, memory bandwidth, disk I/O),
and anything at all with backend="unsafe-local", which runs code as a plain host subprocess and
exists only behind an explicit allow_unsafe_local=True. Limits are per test, not per machine:
many concurrent runs can still use max_concurrency x the per-run memory.

Sessions (sandbox/sessions/pool.py, contract in sandbox/sessions/api.py) give an agent one persistent,
isolated workspace per episode: `async with sandbox.session(SessionLimits(...)) as ws:` then
`ws.exec`, `ws.python` (a kernel), `ws.write_file`/`read_file`/`upload`/`download`.

This package imports neither torch, gspo_agents nor envs.
"""

from sandbox.config import SandboxConfig
from sandbox.core import Sandbox
from sandbox.errors import BackendFailure, ImageBuildError, SandboxError, SandboxUnavailable
from sandbox.sessions import SessionPool, close_sessions, session
from sandbox.sessions.api import (
    ExecResult,
    SessionBudgetExceeded,
    SessionClosed,
    SessionLimits,
    SessionUsage,
    Workspace,
)
from sandbox.types import (
    JudgeSpec,
    Limits,
    Program,
    RunResult,
    TestCase,
    TestResult,
    Verdict,
)

__all__ = [
    "BackendFailure",
    "ExecResult",
    "SessionBudgetExceeded",
    "SessionClosed",
    "SessionLimits",
    "SessionPool",
    "SessionUsage",
    "Workspace",
    "close_sessions",
    "session",
    "ImageBuildError",
    "JudgeSpec",
    "Limits",
    "Program",
    "RunResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxUnavailable",
    "TestCase",
    "TestResult",
    "Verdict",
]
