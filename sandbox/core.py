"""`Sandbox`: choose a backend, bound concurrency, run a submission, judge it on the host."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from sandbox.config import SandboxConfig
from sandbox.errors import BackendFailure, SandboxUnavailable
from sandbox.isolation.backends.base import Backend, RunnerOutput
from sandbox.judging import compile_cache as compiled
from sandbox.judging import judge as judging
from sandbox.judging.compile_cache import CompileCache, image_identity, shared_cache
from sandbox.judging.functional import apply_judge, harness_request
from sandbox.registry import remote
from sandbox.types import JudgeSpec, Limits, Program, RunResult, TestCase, TestResult, Verdict

log = logging.getLogger("sandbox")

BackendName = Literal["auto", "docker", "bubblewrap", "namespaces", "unsafe-local", "remote"]
LOCAL_BACKENDS: tuple[str, ...] = ("auto", "docker", "bubblewrap", "namespaces", "unsafe-local")
BACKENDS: tuple[str, ...] = (*LOCAL_BACKENDS, "remote")  # remote: sandbox/service/remote.py
AUTO_ORDER: tuple[str, ...] = ("docker", "bubblewrap", "namespaces")  # strongest first
COMPILE_LIMITS = Limits(
    time_s=20.0, memory_mb=2048, output_bytes=1 << 20, processes=32, wall_time_s=60.0
)
CHECKER_LIMITS = Limits(time_s=10.0, memory_mb=1024, output_bytes=1 << 20, processes=16)
DEFAULT_LIMITS, DEFAULT_JUDGE = Limits(), JudgeSpec()  # frozen, so safe to share
_STATUS = {
    "ok": Verdict.OK,
    "tle": Verdict.TLE,
    "mle": Verdict.MLE,
    "re": Verdict.RE,
    "ole": Verdict.OLE,
}


def build_backend(name: str, slots: int, options: dict[str, Any]) -> Backend:
    """Construct and check one named backend; raise SandboxUnavailable naming the fix."""
    if name == "docker":
        from sandbox.isolation.backends.docker import DockerBackend

        backend: Any = DockerBackend(slots, **options)
    elif name == "bubblewrap":
        from sandbox.isolation.backends.bubblewrap import BubblewrapBackend

        backend = BubblewrapBackend(slots, **options)
    elif name == "namespaces":
        from sandbox.isolation.backends.namespaces import NamespacesBackend

        backend = NamespacesBackend(slots, **options)
    elif name == "unsafe-local":
        from sandbox.isolation.backends.local import UnsafeLocalBackend

        backend = UnsafeLocalBackend(slots)
    else:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {BACKENDS}")
    backend.check()
    return backend


# Pauses before re-running a run lost to the infrastructure (a restarting Docker daemon takes
# a few seconds to answer again); after the last one the run is SE.
RETRY_BACKOFF_S = (1.0, 4.0)


class Sandbox:
    """Runs untrusted programs against tests on one backend, at most `max_concurrency` at once.

    Share one Sandbox per process (it owns the warm pool); it belongs to the event loop that
    first uses it. Infrastructure failures come back as Verdict.SE, never as an exception.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        max_concurrency: int,
        compile_cache: CompileCache | bool = True,
    ) -> None:
        self._backend = backend
        self.backend_name: str = backend.name
        self.max_concurrency = max_concurrency
        self._sem = asyncio.Semaphore(max_concurrency)
        # True: the process-wide cache (sandbox/judging/compile_cache.py); False: compile every time.
        self.compile_cache: CompileCache | None = (
            shared_cache() if compile_cache is True else compile_cache or None
        )
        self._image = image_identity(backend)

    @classmethod
    def create(
        cls,
        backend: BackendName = "auto",
        *,
        max_concurrency: int = 4,
        allow_unsafe_local: bool = False,
        compile_cache: CompileCache | bool = True,
        **backend_options: Any,
    ) -> Sandbox:
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {BACKENDS}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency={max_concurrency} must be >= 1")
        if backend == "remote":  # urls=[...], token=...: runs on `python -m sandbox serve`
            return remote().sandbox(max_concurrency, **backend_options)
        if backend == "unsafe-local":
            if not allow_unsafe_local:
                raise SandboxUnavailable(
                    "backend='unsafe-local' runs generated code on the host WITHOUT ANY "
                    "isolation; pass allow_unsafe_local=True if you really mean it"
                )
            log.warning(
                "sandbox: UNSAFE-LOCAL backend selected: generated code runs on this "
                "host with NO isolation (allow_unsafe_local=True)"
            )
            return cls(
                build_backend(backend, max_concurrency, {}),
                max_concurrency=max_concurrency,
                compile_cache=compile_cache,
            )
        if backend != "auto":
            chosen = build_backend(backend, max_concurrency, backend_options)
            log.info("sandbox: using the %s backend (requested)", backend)
            return cls(chosen, max_concurrency=max_concurrency, compile_cache=compile_cache)
        return cls(
            _pick_auto(max_concurrency, backend_options),
            max_concurrency=max_concurrency,
            compile_cache=compile_cache,
        )

    @classmethod
    def from_config(cls, config: SandboxConfig) -> Sandbox:
        """Build from the sandbox's config schema (e.g. a Hydra `sandbox` group)."""
        return cls.create(
            config.backend,  # type: ignore[arg-type]
            max_concurrency=config.max_concurrency,
            allow_unsafe_local=config.allow_unsafe_local,
            **config.backend_options(),
        )

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await asyncio.shield(self._backend.aclose())

    async def run(
        self,
        program: Program,
        tests: Sequence[TestCase],
        limits: Limits = DEFAULT_LIMITS,
        judge: JudgeSpec = DEFAULT_JUDGE,
        *,
        early_stop: bool = False,
    ) -> RunResult:
        """Compile once, run every test under `limits`, judge on the host."""
        tests = apply_judge(program, list(tests), judge)
        if not tests:
            raise ValueError("Sandbox.run needs at least one TestCase")
        interactive = early_stop  # checker mode stops at a crash/TLE; the checker at a reject

        def keep_going(event: dict[str, Any]) -> bool:
            if judge.mode == "checker":
                return _raw_result(event).verdict is Verdict.OK
            return _judge_event(event, tests[event["index"]], judge).verdict is Verdict.OK

        request = self._request(program, [{"stdin": t.stdin} for t in tests], limits, interactive)
        cached_error = compiled.prepare(self.compile_cache, program, self._image, request)
        if cached_error is not None:  # this exact source failed to compile before
            return RunResult(Verdict.CE, (), cached_error.message, self.backend_name)
        async with self._sem:
            try:
                out = await self._execute_with_retries(request, keep_going, limits, len(tests))
            except (BackendFailure, OSError) as exc:  # OSError: the backend's binary vanished
                return self._system_error(tests, str(exc))
            compiled.remember(self.compile_cache, program, self._image, request, out)
            result = self._assemble(out, tests, judge, early_stop)
            if judge.mode == "checker" and result.verdict is not Verdict.SE:
                result = await self._check(result, tests, judge, early_stop)
        return result

    # ---- internals ----------------------------------------------------------------------
    async def _execute_with_retries(self, request, keep_going, limits: Limits, num_tests: int):
        """A run lost to the infrastructure (container killed, daemon restarted, runner crash)
        is re-run on a fresh sandbox: judging is a pure function of program and tests, so a
        retry cannot change a verdict, only recover one. The last failure is raised (-> SE)."""
        for attempt, pause_s in enumerate((*RETRY_BACKOFF_S, None)):
            try:
                out = await self._backend.execute(request, keep_going, _budget(limits, num_tests))
            except (BackendFailure, OSError) as exc:
                if pause_s is None:
                    raise
                reason = str(exc)
            else:
                if out.finished or pause_s is None:  # not finished: the runner died mid-run
                    return out
                reason = _crash_message(self.backend_name, out)
            log.warning(
                "sandbox %s: run lost (%s); retry %d in %.0f s",
                self.backend_name, reason, attempt + 1, pause_s,
            )  # fmt: skip
            await asyncio.sleep(pause_s)
        raise AssertionError("unreachable")

    def _request(
        self, program: Program, tests: list[dict[str, Any]], limits: Limits, interactive: bool
    ) -> dict[str, Any]:
        return {
            "language": program.language,
            "source": program.source,
            "harness": harness_request(program),
            "tests": tests,
            "limits": self._limits(limits),
            "compile_limits": self._limits(COMPILE_LIMITS),
            "interactive": interactive,
            "kill_all": self._backend.kill_all,
            "scratch_parent": self._backend.scratch_parent,
            "wipe_dirs": list(self._backend.wipe_dirs),
            "seccomp": self._backend.seccomp,
        }

    def _limits(self, limits: Limits) -> dict[str, Any]:
        margin = self._backend.nproc_margin
        return {
            "time_s": limits.time_s,
            "memory_mb": limits.memory_mb,
            "output_bytes": limits.output_bytes,
            "wall_time_s": limits.effective_wall_time_s,
            "processes": limits.processes,  # the whole tree's, where cgroups count it
            "nproc": limits.processes + margin if margin else None,
            "file_bytes": max(limits.output_bytes, 64 << 20),
        }

    def _system_error(self, tests: list[TestCase], message: str) -> RunResult:
        log.warning("sandbox %s: system error: %s", self.backend_name, message)
        failed = TestResult(Verdict.SE, 0.0, 0.0, "", "", None, message)
        return RunResult(Verdict.SE, tuple(failed for _ in tests), "", self.backend_name)

    def _assemble(
        self, out: RunnerOutput, tests: list[TestCase], judge: JudgeSpec, early_stop: bool
    ) -> RunResult:
        if not out.compile_ok:
            if out.finished:
                return RunResult(Verdict.CE, (), out.compile_output, self.backend_name)
            return self._system_error(tests, _crash_message(self.backend_name, out))
        if judge.mode == "checker":
            results = [_raw_result(e) for e in out.tests]
        else:
            results = [_judge_event(e, tests[e["index"]], judge) for e in out.tests]
        if not out.finished:
            return self._system_error(tests, _crash_message(self.backend_name, out))
        if early_stop:
            results = _truncate_after_failure(results)
        return RunResult(
            _overall(results, len(tests)), tuple(results), out.compile_output, self.backend_name
        )

    async def _check(
        self, result: RunResult, tests: list[TestCase], judge: JudgeSpec, early_stop: bool
    ) -> RunResult:
        """Run the checker program over every test the program survived (in its own sandbox)."""
        assert judge.checker is not None
        todo = [i for i, r in enumerate(result.tests) if r.verdict is Verdict.OK]
        if not todo:
            return result
        files = [_checker_test(tests[i], result.tests[i].stdout, judge) for i in todo]

        def keep_going(event: dict[str, Any]) -> bool:
            raw = result.tests[todo[event["index"]]]
            return _checker_verdict(raw, event, judge).verdict is Verdict.OK

        request = self._request(judge.checker, files, CHECKER_LIMITS, early_stop)
        cached_error = compiled.prepare(self.compile_cache, judge.checker, self._image, request)
        if cached_error is not None:
            return self._system_error(tests, f"checker failed: {cached_error.message[-1000:]}")
        try:
            out = await self._execute_with_retries(request, keep_going, CHECKER_LIMITS, len(todo))
        except (BackendFailure, OSError) as exc:
            return self._system_error(tests, f"checker: {exc}")
        compiled.remember(self.compile_cache, judge.checker, self._image, request, out)
        complete = len(out.tests) == len(todo) or (early_stop and out.tests)
        if not out.compile_ok or not out.finished or not complete:
            why = out.compile_output if not out.compile_ok else _crash_message("checker", out)
            return self._system_error(tests, f"checker failed: {why[-1000:]}")
        results = list(result.tests)
        for i, event in zip(todo, out.tests):
            results[i] = _checker_verdict(results[i], event, judge)
        if len(out.tests) < len(todo):  # early stop: the checker rejected test todo[k]
            results = results[: todo[len(out.tests) - 1] + 1]
        if early_stop:
            results = _truncate_after_failure(results)
        return RunResult(
            _overall(results, len(tests)), tuple(results), result.compile_output, self.backend_name
        )


def _pick_auto(slots: int, options: dict[str, Any]) -> Backend:
    reasons = []
    for name in AUTO_ORDER:
        try:
            backend = build_backend(name, slots, options if name == "docker" else {})
        except SandboxUnavailable as exc:
            reasons.append(str(exc))
            continue
        why = f" ({'; '.join(reasons)})" if reasons else ""
        log.info("sandbox: backend=auto picked %s, the strongest available%s", name, why)
        return backend
    raise SandboxUnavailable(
        "no sandbox backend can isolate on this machine:\n  " + "\n  ".join(reasons)
    )


def _budget(limits: Limits, n_tests: int) -> float:
    """Host-side backstop for a whole runner call; the real limits are enforced inside."""
    return COMPILE_LIMITS.effective_wall_time_s + n_tests * (limits.effective_wall_time_s + 2) + 30


def _raw_result(event: dict[str, Any]) -> TestResult:
    return TestResult(
        _STATUS[event["status"]],
        float(event["time_s"]),
        float(event["memory_mb"]),
        event["stdout"],
        event["stderr"],
        event["exit_code"],
        event["message"],
        float(event.get("wall_s", 0.0)),
    )


def _judge_event(event: dict[str, Any], test: TestCase, spec: JudgeSpec) -> TestResult:
    raw = _raw_result(event)
    if raw.verdict is not Verdict.OK or test.expected is None:
        return raw
    ok, message = judging.compare(raw.stdout, test.expected, spec)
    if ok:
        return raw
    return replace(raw, verdict=Verdict.WA, message=message)


def _checker_test(test: TestCase, output: str, judge: JudgeSpec) -> dict[str, Any]:
    """One checker run: testlib reads three files; a Kattis output validator reads the input
    and answer files, writes feedback to a directory (its scratch dir) and the output on stdin."""
    answer = test.expected or ""
    if judge.checker_protocol == "kattis":
        return {
            "stdin": output,
            "argv": ["input.txt", "answer.txt", "./", *judge.checker_args],
            "files": {"input.txt": test.stdin, "answer.txt": answer},
            "collect": [JUDGE_MESSAGE],  # the validator's feedback for a human judge
        }
    return {
        "stdin": "",
        "argv": ["input.txt", "output.txt", "answer.txt", *judge.checker_args],
        "files": {"input.txt": test.stdin, "output.txt": output, "answer.txt": answer},
    }


KATTIS_ACCEPT, KATTIS_REJECT = 42, 43
JUDGE_MESSAGE = "judgemessage.txt"


def _checker_verdict(raw: TestResult, event: dict[str, Any], judge: JudgeSpec) -> TestResult:
    status, code = event["status"], event["exit_code"]
    note = (event["stdout"] + event["stderr"]).strip()[-500:]
    feedback = (event.get("files") or {}).get(JUDGE_MESSAGE, "").strip()
    if feedback:  # Kattis: judgemessage.txt is what a judge reads first
        note = f"{JUDGE_MESSAGE}: {feedback[:1500]}" + (f"\n{note}" if note else "")
    if judge.checker_protocol == "kattis":  # 42/43 only: a crash is never the contestant's
        if status == "re" and code == KATTIS_ACCEPT:
            status = "ok"
        elif status == "re" and code == KATTIS_REJECT:
            code = 1
        else:  # exit 0, another code, a signal or a limit: the validator failed
            status = "validator"
    if status == "ok":
        return replace(raw, verdict=Verdict.OK, message=note)
    if status == "re" and code is not None and code > 0 and code != 3:
        return replace(raw, verdict=Verdict.WA, message=note or f"checker exit code {code}")
    # testlib's exit code 3 ("fail"), or the checker crashed / ran out of limits: not the
    # contestant's fault.
    return replace(
        raw, verdict=Verdict.SE, message=f"checker failed ({event['message'] or code}): {note}"
    )


def _truncate_after_failure(results: list[TestResult]) -> list[TestResult]:
    for i, r in enumerate(results):
        if r.verdict is not Verdict.OK:
            return results[: i + 1]
    return results


def _overall(results: list[TestResult], n_tests: int) -> Verdict:
    for r in results:
        if r.verdict is not Verdict.OK:
            return r.verdict
    if len(results) < n_tests:
        return Verdict.SE  # tests silently missing: never report a pass for them
    return Verdict.OK


def _crash_message(backend: str, out: RunnerOutput) -> str:
    diag = out.diagnostics.strip()
    return f"{backend}: the sandbox runner ended unexpectedly" + (f": {diag}" if diag else "")
