"""math-verify in a process pool with our own per-verification timeout.

math-verify's built-in timeouts use signal.alarm, which only works on a process's main thread and
cannot interrupt C code (a huge integer power inside sympy). So verification runs in spawned
worker processes with math-verify's timeouts off, and the parent enforces the deadline: a
verification that overruns, or a worker that dies, kills the pool's workers, starts a fresh pool
on the next call, and raises `InfraError` (never a reward of 0). Verifications that were merely
caught in a restart another caller triggered are retried once.

Outcomes that are about the data rather than the infrastructure are returned, not raised: the
caller turns `gold_ok=False` into a `TaskError` and `pred_ok=False` into reward 0.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures as cf
import contextlib
import logging
import multiprocessing
import sys
import threading
import types
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from envs.errors import InfraError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
_STARTUP_TIMEOUT_S = 120.0  # spawn + import sympy on a loaded 2-core machine


@dataclass(frozen=True, slots=True)
class Verification:
    """The verdict of one comparison. `correct` implies `gold_ok and pred_ok`."""

    correct: bool
    gold_ok: bool
    pred_ok: bool


# -- worker side (runs in the spawned processes) ---------------------------------------------------
def _worker_init() -> None:
    import logging as _logging

    import math_verify  # noqa: F401  -- import once per worker, not per task

    # math-verify warns once that its own timeouts are off: that is deliberate here.
    _logging.getLogger("math_verify").setLevel(_logging.ERROR)


def _parse(text: str) -> list:
    from math_verify import parse

    for candidate in (f"\\boxed{{{text}}}", f"${text}$", text):
        parsed = parse(candidate, parsing_timeout=None)
        if _has_math(parsed):
            return parsed
    return []


def _has_math(parsed: list) -> bool:
    """math-verify returns bare strings when sympy could not read the text: not an answer."""
    from sympy import Basic
    from sympy.matrices import MatrixBase

    return any(isinstance(p, (Basic, MatrixBase)) for p in parsed)


def _verify_task(gold: str, pred: str) -> tuple[bool, bool, bool]:
    from math_verify import verify

    gold_parsed = _parse(gold)
    if not gold_parsed:
        return False, False, False
    pred_parsed = _parse(pred)
    if not pred_parsed:
        return False, True, False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None)), True, True


def _noop() -> None:
    return None


# -- parent side -------------------------------------------------------------------------------
class VerifierPool:
    """A restartable pool of math-verify worker processes (spawn context).

    `averify` awaits without blocking the event loop; `verify` blocks the calling thread. Both
    raise InfraError on a timeout or a crashed worker.
    """

    def __init__(self, max_workers: int = 2) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._executor: cf.ProcessPoolExecutor | None = None
        self._generation = 0  # bumped on every restart, so victims of a restart can retry

    # public API
    async def averify(
        self, gold: str, pred: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Verification:
        for attempt in range(2):
            executor, generation = await asyncio.to_thread(self._started)
            future = executor.submit(_verify_task, gold, pred)
            try:
                result = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
            except (asyncio.TimeoutError, TimeoutError) as exc:
                self._restart(generation)
                raise InfraError(
                    f"math-verify took longer than {timeout_s} s; worker restarted"
                ) from exc
            except BrokenProcessPool as exc:
                if self._was_restarted_since(generation) and attempt == 0:
                    continue
                self._restart(generation)
                raise InfraError(f"math-verify worker process died: {exc}") from exc
            return Verification(*result)
        raise AssertionError("unreachable")

    def verify(self, gold: str, pred: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Verification:
        for attempt in range(2):
            executor, generation = self._started()
            future = executor.submit(_verify_task, gold, pred)
            try:
                return Verification(*future.result(timeout=timeout_s))
            except cf.TimeoutError as exc:
                self._restart(generation)
                raise InfraError(
                    f"math-verify took longer than {timeout_s} s; worker restarted"
                ) from exc
            except BrokenProcessPool as exc:
                if self._was_restarted_since(generation) and attempt == 0:
                    continue
                self._restart(generation)
                raise InfraError(f"math-verify worker process died: {exc}") from exc
        raise AssertionError("unreachable")

    def worker_pids(self) -> list[int]:
        """Pids of the live workers (for tests and debugging)."""
        with self._lock:
            executor = self._executor
            # ProcessPoolExecutor exposes no public handle on its processes.
            procs = getattr(executor, "_processes", None) or {}
            return [p.pid for p in procs.values() if p.is_alive()]

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            self._generation += 1
        _kill(executor)

    # internals
    def _started(self) -> tuple[cf.ProcessPoolExecutor, int]:
        """The live executor, started and warmed (workers spawned, math-verify imported)."""
        with self._lock:
            if self._executor is None:
                executor = cf.ProcessPoolExecutor(
                    self.max_workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_init,
                )
                # Spawning and importing take seconds; do it before any verification's clock starts.
                # All workers are spawned by these submits, so none re-imports the trainer's main.
                with _main_module_hidden():
                    warm = [executor.submit(_noop) for _ in range(self.max_workers)]
                try:
                    for f in warm:
                        f.result(timeout=_STARTUP_TIMEOUT_S)
                except Exception as exc:
                    _kill(executor)
                    raise InfraError(
                        f"could not start math-verify worker processes: {exc}"
                    ) from exc
                self._executor = executor
            return self._executor, self._generation

    def _restart(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation:
                return  # somebody else already restarted it
            executor, self._executor = self._executor, None
            self._generation += 1
        log.warning("restarting the math-verify worker pool")
        _kill(executor)

    def _was_restarted_since(self, generation: int) -> bool:
        with self._lock:
            return generation != self._generation


@contextlib.contextmanager
def _main_module_hidden():
    """Spawned children re-import the parent's __main__ (for the trainer: torch, ~seconds and
    hundreds of MB per worker). Workers only run this module's functions, so while they are
    spawned a bare placeholder stands in for __main__."""
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real


def _kill(executor: cf.ProcessPoolExecutor | None) -> None:
    """Kill the workers outright: a stuck sympy call ignores anything gentler."""
    if executor is None:
        return
    for proc in list((getattr(executor, "_processes", None) or {}).values()):
        proc.kill()
    executor.shutdown(wait=False, cancel_futures=True)


_shared: dict[int, VerifierPool] = {}
_shared_lock = threading.Lock()


def shared_pool(max_workers: int = 2) -> VerifierPool:
    """One pool per process and size, shared by every Math env instance."""
    with _shared_lock:
        if max_workers not in _shared:
            _shared[max_workers] = VerifierPool(max_workers)
        return _shared[max_workers]


@atexit.register
def _close_shared() -> None:
    for pool in list(_shared.values()):
        pool.close()
