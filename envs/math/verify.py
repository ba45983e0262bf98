"""math-verify in a process pool with our own per-verification timeout.

math-verify's built-in timeouts use signal.alarm, which only works on a process's main thread and
cannot interrupt C code (a huge integer power inside sympy). So verification runs in spawned
worker processes with math-verify's timeouts off, and the parent enforces the deadline.

Who is to blame (DESIGN.md: what the model caused is the model's, infrastructure is not):
- The deadline measures verification only. At most `max_workers` verifications are inside the
  pool at once (a FIFO gate shared by threads and event loops), so none waits in the executor's
  queue while its clock runs; time spent waiting for the gate or for workers to start is free.
- The model's answer makes the verifier time out, raise (deep nesting, a parse blow-up) or crash
  the worker twice in a row: `Verification(error=...)`, which the env scores 0 with
  `info["verify_error"]` set (counted in the rollout metrics). A timeout restarts the pool.
- Infrastructure: workers that cannot start, or a pool that also fails a known-good canary
  verification right after crashing on an answer, raise `InfraError` (never a reward of 0).
  Verifications that were merely caught in a restart another caller triggered are retried.

Outcomes that are about the data rather than the infrastructure are returned, not raised: the
caller turns `gold_ok=False` into a `TaskError` and `pred_ok=False` into reward 0.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures as cf
import contextlib
import logging
import multiprocessing
import sys
import threading
import types
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from envs.errors import InfraError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
_STARTUP_TIMEOUT_S = 120.0  # spawn + import sympy on a loaded 2-core machine
_MAX_ATTEMPTS = 6  # includes retries of verifications caught in someone else's restart


@dataclass(frozen=True, slots=True)
class Verification:
    """The verdict of one comparison. `correct` implies `gold_ok and pred_ok`. `error` is set
    when the model's answer broke the verifier (timeout, parse blow-up, crash): reward 0."""

    correct: bool
    gold_ok: bool
    pred_ok: bool
    error: str = ""


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


def _verify_task(gold: str, pred: str) -> tuple[bool, bool, bool, str]:
    from math_verify import verify

    try:
        gold_parsed = _parse(gold)
    except Exception:  # noqa: BLE001 - an unreadable gold answer is the task's problem
        return False, False, False, ""
    if not gold_parsed:
        return False, False, False, ""
    try:
        pred_parsed = _parse(pred)
    except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, sympy internals
        return False, True, False, f"parsing the answer raised {type(exc).__name__}: {exc!s:.200}"
    if not pred_parsed:
        return False, True, False, ""
    try:
        correct = bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))
    except Exception as exc:  # noqa: BLE001
        return False, True, True, f"comparing the answer raised {type(exc).__name__}: {exc!s:.200}"
    return correct, True, True, ""


def _noop() -> None:
    return None


# -- parent side -------------------------------------------------------------------------------
class _Slots:
    """A FIFO counting gate usable from threads and from any event loop at once."""

    def __init__(self, count: int) -> None:
        self._lock = threading.Lock()
        self._free = count
        self._waiters: collections.deque[_Waiter] = collections.deque()

    def acquire_sync(self) -> None:
        event = threading.Event()
        waiter = _Waiter(event.set)
        if self._enqueue(waiter):
            event.wait()

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # that loop is closed: pass the slot on
                self.release()

        waiter = _Waiter(wake)
        if not self._enqueue(waiter):
            return
        try:
            await future
        except BaseException:
            with self._lock:
                if not waiter.handed:
                    self._waiters.remove(waiter)
                    raise
            self.release()  # the slot reached us as we were cancelled
            raise

    def release(self) -> None:
        with self._lock:
            if not self._waiters:
                self._free += 1
                return
            waiter = self._waiters.popleft()
            waiter.handed = True
        waiter.wake()

    def _enqueue(self, waiter: _Waiter) -> bool:
        """Take a free slot now (False) or queue up for one (True)."""
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return False
            self._waiters.append(waiter)
            return True


class _Waiter:
    __slots__ = ("wake", "handed")

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake, self.handed = wake, False


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class VerifierPool:
    """A restartable pool of math-verify worker processes (spawn context).

    `averify` awaits without blocking the event loop; `verify` blocks the calling thread. Both
    return a Verification (with `error` set when the answer broke the verifier) and raise
    InfraError only when the pool itself is broken.
    """

    def __init__(self, max_workers: int = 2) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._executor: cf.ProcessPoolExecutor | None = None
        self._generation = 0  # bumped on every restart, so victims of a restart can retry
        self._slots = _Slots(max_workers)

    # public API
    async def averify(
        self, gold: str, pred: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Verification:
        crashes = 0
        for _ in range(_MAX_ATTEMPTS):
            await self._slots.acquire()
            try:
                executor, generation = await asyncio.to_thread(self._started)
                future = executor.submit(_verify_task, gold, pred)
                result = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
            except (asyncio.TimeoutError, TimeoutError):
                return self._timed_out(generation, timeout_s)
            except (BrokenProcessPool, RuntimeError) as exc:  # RuntimeError: shut down under us
                crashes += self._crashed(generation, exc)
                if crashes < 2:
                    continue
                return await asyncio.to_thread(self._blame_answer_or_raise, exc)
            finally:
                self._slots.release()
            return Verification(*result)
        raise InfraError("math-verify: every attempt was lost to worker restarts")

    def verify(self, gold: str, pred: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Verification:
        crashes = 0
        for _ in range(_MAX_ATTEMPTS):
            self._slots.acquire_sync()
            try:
                executor, generation = self._started()
                future = executor.submit(_verify_task, gold, pred)
                return Verification(*future.result(timeout=timeout_s))
            except cf.TimeoutError:
                return self._timed_out(generation, timeout_s)
            except (BrokenProcessPool, RuntimeError) as exc:
                crashes += self._crashed(generation, exc)
                if crashes >= 2:
                    return self._blame_answer_or_raise(exc)
            finally:
                self._slots.release()
        raise InfraError("math-verify: every attempt was lost to worker restarts")

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
    def _timed_out(self, generation: int, timeout_s: float) -> Verification:
        """The answer kept a worker busy past the deadline: the answer's fault, not the pool's."""
        self._restart(generation)
        return Verification(False, True, False, f"verification took longer than {timeout_s:g} s")

    def _crashed(self, generation: int, exc: BaseException) -> int:
        """1 if the pool broke under this verification, 0 if another caller's restart did."""
        if self._was_restarted_since(generation):
            return 0
        log.warning("math-verify worker died (%s); restarting the pool", exc)
        self._restart(generation)
        return 1

    def _blame_answer_or_raise(self, exc: BaseException) -> Verification:
        """A worker died twice on this answer. If a fresh pool verifies a known-good pair the
        answer killed it (reward 0, flagged); if not, the pool is broken (InfraError)."""
        try:
            executor, _ = self._started()
            canary = executor.submit(_verify_task, "1", "1").result(timeout=_STARTUP_TIMEOUT_S)
        except Exception as canary_exc:  # noqa: BLE001 - any failure here is the pool's
            raise InfraError(f"math-verify worker process died: {exc}; {canary_exc!r}") from exc
        if not canary[0]:
            raise InfraError(f"math-verify worker process died: {exc}; canary failed")
        return Verification(False, True, False, "the verifier's worker died twice on this answer")

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
