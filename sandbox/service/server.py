"""The sandbox as an HTTP service (starlette): our judge endpoint and a SandboxFusion-compatible one.

    GET  /health     {"status": "ok", "backend": ..., "in_flight": n}
    POST /judge      a program + tests (or function-style tests) -> verdicts (see `parse_judge`)
    POST /run_code   SandboxFusion's request/response shape: {code, language, stdin,
                     compile_timeout, run_timeout, memory_limit_MB} -> {status, message,
                     compile_result, run_result: {status, execution_time, return_code, stdout,
                     stderr}, executor_pod_name, files}

Admission control: at most max_concurrency runs execute and max_queue wait; beyond that a
request gets 429 with Retry-After at once (back-pressure, not an unbounded backlog). Bodies over
max_body_bytes get 413 before they are read in full. Malformed requests get 400 with a JSON
{"error"} naming the field; an internal error is a JSON 500, never plain text.

Every limit a client sends is checked and capped here (ServiceConfig; defaults in brackets):
  limits.time_s, limits.wall_time_s, run_timeout   finite, in (0, max_time_s]       [60 s]
  limits.memory_mb, memory_limit_MB                integer in [1, max_memory_mb]    [4096]
  limits.output_bytes                              integer in [1, max_output_bytes] [8 MiB]
      and output_bytes x number of tests <= max_total_output_bytes                  [256 MiB]
  limits.processes                                 integer in [1, max_processes]    [256]
  tests                                            1..max_tests                     [1000]
  judge.abs_tol, judge.rel_tol                     finite, in [0, 1e6]
Booleans are not numbers, NaN/Infinity are refused, an integral float (256.0) counts as an
integer; an absent wall_time_s is 3 x time_s + 1 capped at max_time_s. JSON nested deeper than
the parser's limit (~900 levels) is a 400, as is a value nested deeper than 500 levels in
function-style arguments.

The service executes code only through the Sandbox it was given; it binds to 127.0.0.1 unless
told otherwise and has no endpoint that touches the host.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandbox.core import Sandbox
from sandbox.judging.functional import function_call
from sandbox.types import (
    LANGUAGES,
    JudgeSpec,
    Limits,
    Program,
    RunResult,
    TestCase,
    TestResult,
    Verdict,
)

log = logging.getLogger("sandbox.service.server")

LANGUAGE_ALIASES = {
    "python": "python",
    "python3": "python",
    "py": "python",
    "cpp": "cpp",
    "c++": "cpp",
    "cxx": "cpp",
    "cpp17": "cpp",
}


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Server-side maxima: a request asking for more gets 400 naming the field."""

    max_queue: int = 256  # requests waiting for a sandbox slot beyond those running
    max_body_bytes: int = 2 << 20
    max_tests: int = 1000
    max_time_s: float = 60.0  # time_s and wall_time_s (and SandboxFusion's run_timeout)
    max_memory_mb: int = 4096
    max_output_bytes: int = 8 << 20  # per test; the runner's 64 MiB line holds it JSON-escaped
    max_total_output_bytes: int = 256 << 20  # output_bytes x tests: host memory for the reply
    max_processes: int = 256  # >= Limits().processes (128: 64 threads and room)
    retry_after_s: int = 1


class BadRequest(ValueError):
    """A malformed request: answered with 400 and this message."""


class _TooLarge(ValueError):
    pass


def build_app(
    sandbox: Sandbox, config: ServiceConfig | None = None, *, owns_sandbox: bool = False
) -> Starlette:
    """The ASGI app; with owns_sandbox it closes `sandbox` when the server shuts down."""
    config = config or ServiceConfig()
    state = {"pending": 0}
    capacity = sandbox.max_concurrency + config.max_queue

    async def admitted(request: Request, handler: Any) -> JSONResponse:
        if state["pending"] >= capacity:
            return JSONResponse(
                {"error": "sandbox queue is full, retry later"},
                status_code=429,
                headers={"Retry-After": str(config.retry_after_s)},
            )
        state["pending"] += 1
        try:
            body = await _read_json(request, config.max_body_bytes)
            return JSONResponse(await handler(body))
        except _TooLarge as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        except (BadRequest, ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except (RecursionError, MemoryError) as exc:  # a pathological value got past parsing
            return JSONResponse({"error": f"request too complex: {exc!r:.200}"}, status_code=400)
        except Exception as exc:  # a bug: still a JSON answer, never starlette's plain text
            log.exception("sandbox service: internal error")
            return JSONResponse({"error": f"internal error: {exc!r:.300}"}, status_code=500)
        finally:
            state["pending"] -= 1

    async def judge(request: Request) -> JSONResponse:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            program, tests, limits, spec, early_stop = parse_judge(body, config)
            return result_json(
                await sandbox.run(program, tests, limits, spec, early_stop=early_stop)
            )

        return await admitted(request, handle)

    async def run_code(request: Request) -> JSONResponse:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            program, test, limits = parse_run_code(body, config)
            return fusion_response(program, await sandbox.run(program, [test], limits))

        return await admitted(request, handle)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "backend": sandbox.backend_name, "in_flight": state["pending"]}
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if owns_sandbox:
                await sandbox.aclose()

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/judge", judge, methods=["POST"]),
            Route("/run_code", run_code, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


async def _read_json(request: Request, limit: int) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge(f"request body of {declared} bytes exceeds the {limit}-byte limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge(f"request body exceeds the {limit}-byte limit")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except RecursionError as exc:
        raise BadRequest("request body nests too deeply (JSON depth is limited to ~900)") from exc
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, or an int too long
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


# ---- request parsing ------------------------------------------------------------------------
def _field(
    body: dict[str, Any],
    name: str,
    kind: type | tuple[type, ...],
    default: Any = ...,
    *,
    where: str = "",
) -> Any:
    label = where + name
    if name not in body or body[name] is None:
        if default is ...:
            raise BadRequest(f"missing required field {label!r}")
        return default
    value = body[name]
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise BadRequest(f"field {label!r} must be a number, got a boolean")
    if not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise BadRequest(f"field {label!r} must be {want}, got {type(value).__name__}")
    return value


def _check_keys(body: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequest(f"unknown field(s) {unknown} in {where}; known: {sorted(known)}")


def parse_language(value: Any) -> str:
    if not isinstance(value, str) or value.lower() not in LANGUAGE_ALIASES:
        raise BadRequest(
            f"unsupported language {value!r}; supported: {list(LANGUAGES)} "
            f"(aliases: {sorted(LANGUAGE_ALIASES)})"
        )
    return LANGUAGE_ALIASES[value.lower()]


def _number(
    body: dict[str, Any], name: str, low: float, high: float, default: Any, *, where: str = ""
) -> Any:
    """A finite number in (low, high], not a boolean; `default` when absent or null."""
    if body.get(name) is None:
        return default
    value = _field(body, name, (int, float), where=where)
    label = f"{where}{name}"
    if not math.isfinite(value):
        raise BadRequest(f"field {label!r} must be a finite number, got {value!r}")
    if not low < value <= high:
        raise BadRequest(
            f"field {label!r}={value!r} is out of range: must be in ({low:g}, {high:g}]"
        )
    return value


def _integer(body: dict[str, Any], name: str, high: int, default: Any, *, where: str = "") -> Any:
    """An integer in [1, high] (an integral float such as 256.0 is accepted)."""
    if body.get(name) is None:
        return default
    value = _number(body, name, 0, high, default, where=where)
    if isinstance(value, float):
        if not value.is_integer():
            raise BadRequest(f"field {where + name!r} must be an integer, got {value!r}")
        value = int(value)
    if value < 1:
        raise BadRequest(f"field {where + name!r}={value!r} is out of range: must be >= 1")
    return value


LIMIT_KEYS = {"time_s", "memory_mb", "output_bytes", "processes", "wall_time_s"}


def _limits(raw: dict[str, Any], config: ServiceConfig, num_tests: int) -> Limits:
    _check_keys(raw, LIMIT_KEYS, "limits")
    d, w = Limits(), "limits."
    output_bytes = _integer(raw, "output_bytes", config.max_output_bytes, d.output_bytes, where=w)
    if output_bytes * num_tests > config.max_total_output_bytes:
        raise BadRequest(
            f"field 'limits.output_bytes'={output_bytes} x {num_tests} tests exceeds the "
            f"service's total of {config.max_total_output_bytes} bytes; lower one of them"
        )
    time_s = float(_number(raw, "time_s", 0, config.max_time_s, d.time_s, where=w))
    wall_time_s = _number(raw, "wall_time_s", 0, config.max_time_s, None, where=w)
    if wall_time_s is None:  # the library's default (3 x time_s + 1), within the maximum
        wall_time_s = min(3 * time_s + 1, config.max_time_s)
    return Limits(
        time_s=time_s,
        memory_mb=_integer(raw, "memory_mb", config.max_memory_mb, d.memory_mb, where=w),
        output_bytes=output_bytes,
        processes=_integer(raw, "processes", config.max_processes, d.processes, where=w),
        wall_time_s=float(wall_time_s),
    )


JUDGE_KEYS = {"language", "source", "tests", "limits", "judge", "early_stop", "function"}


def parse_judge(
    body: dict[str, Any], config: ServiceConfig
) -> tuple[Program, list[TestCase], Limits, JudgeSpec, bool]:
    """{"language", "source", "tests": [{"stdin", "expected"?}] or with "function": name
    [{"args" | "kwargs", "expected"?}], "limits"?: {...}, "judge"?: {"mode", "abs_tol",
    "rel_tol", "checker": {"language", "source"}}, "early_stop"?: bool}"""
    _check_keys(body, JUDGE_KEYS, "the request")
    language = parse_language(_field(body, "language", str))
    source = _field(body, "source", str)
    raw_tests = _field(body, "tests", list)
    if not raw_tests or len(raw_tests) > config.max_tests:
        raise BadRequest(f"'tests' must hold 1..{config.max_tests} tests, got {len(raw_tests)}")
    if not all(isinstance(t, dict) for t in raw_tests):
        raise BadRequest("every test must be a JSON object")
    function = _field(body, "function", str, None)
    if function is not None:
        if language != "python":
            raise BadRequest("function-style tests are supported for python only")
        program, tests = function_call(source, function, raw_tests)
    else:
        program = Program(language, source)  # type: ignore[arg-type]
        tests = [_stdin_test(t, i) for i, t in enumerate(raw_tests)]
    limits = _limits(_field(body, "limits", dict, {}), config, len(tests))
    spec = _judge_spec(_field(body, "judge", dict, {}))
    return program, tests, limits, spec, bool(_field(body, "early_stop", bool, False))


def _stdin_test(raw: dict[str, Any], index: int) -> TestCase:
    _check_keys(raw, {"stdin", "expected"}, f"tests[{index}]")
    where = f"tests[{index}]."
    stdin = _field(raw, "stdin", str, "", where=where)
    return TestCase(stdin=stdin, expected=_field(raw, "expected", str, None, where=where))


def _judge_spec(raw: dict[str, Any]) -> JudgeSpec:
    _check_keys(raw, {"mode", "abs_tol", "rel_tol", "checker"}, "judge")
    checker = None
    if raw.get("checker") is not None:
        c = _field(raw, "checker", dict, where="judge.")
        checker = Program(
            parse_language(c.get("language")),  # type: ignore[arg-type]
            _field(c, "source", str, where="judge.checker."),
        )
    return JudgeSpec(
        mode=_field(raw, "mode", str, "tokens", where="judge."),
        abs_tol=_tolerance(raw, "abs_tol"),
        rel_tol=_tolerance(raw, "rel_tol"),
        checker=checker,
    )


def _tolerance(raw: dict[str, Any], name: str) -> float:
    value = _field(raw, name, (int, float), 1e-6, where="judge.")
    if not (math.isfinite(value) and 0 <= value <= 1e6):
        raise BadRequest(f"field 'judge.{name}' must be a finite number in [0, 1e6], got {value!r}")
    return float(value)


FUSION_KEYS = {
    "code",
    "language",
    "stdin",
    "compile_timeout",
    "run_timeout",
    "memory_limit_MB",
    "files",
    "fetch_files",
}


def parse_run_code(body: dict[str, Any], config: ServiceConfig) -> tuple[Program, TestCase, Limits]:
    """SandboxFusion's RunCodeRequest; files/fetch_files are accepted only when empty."""
    _check_keys(body, FUSION_KEYS, "the request")
    program = Program(
        parse_language(_field(body, "language", str)),  # type: ignore[arg-type]
        _field(body, "code", str),
    )
    if _field(body, "files", dict, {}) or _field(body, "fetch_files", list, []):
        raise BadRequest("'files' and 'fetch_files' are not supported by this service")
    run_timeout = float(_number(body, "run_timeout", 0, config.max_time_s, 10))
    # compile limits are the sandbox's own; the field is checked, then ignored
    _number(body, "compile_timeout", 0, 1e6, 10)
    raw_memory = _field(body, "memory_limit_MB", (int, float), -1)
    if isinstance(raw_memory, (int, float)) and math.isfinite(raw_memory) and raw_memory <= 0:
        memory = 1024  # SandboxFusion: 0 or -1 mean "the default"
    else:
        memory = _integer(body, "memory_limit_MB", config.max_memory_mb, 1024)
    # SandboxFusion's run_timeout is wall-clock; CPU time gets the same budget.
    limits = Limits(time_s=run_timeout, memory_mb=memory, wall_time_s=run_timeout)
    return program, TestCase(stdin=_field(body, "stdin", str, "")), limits


# ---- responses ------------------------------------------------------------------------------
def test_json(t: TestResult) -> dict[str, Any]:
    return {
        "verdict": t.verdict.value,
        "time_s": round(t.time_s, 4),
        "memory_mb": round(t.memory_mb, 2),
        "stdout": t.stdout,
        "stderr": t.stderr,
        "exit_code": t.exit_code,
        "message": t.message,
    }


def result_json(result: RunResult) -> dict[str, Any]:
    return {
        "verdict": result.verdict.value,
        "passed": result.passed,
        "total": len(result.tests),
        "compile_output": result.compile_output,
        "backend": result.backend,
        "tests": [test_json(t) for t in result.tests],
    }


def fusion_response(program: Program, result: RunResult) -> dict[str, Any]:
    """RunResult -> SandboxFusion's RunCodeResponse."""
    base: dict[str, Any] = {
        "executor_pod_name": None,
        "files": {},
        "compile_result": None,
        "run_result": None,
    }
    if result.verdict is Verdict.SE:
        message = result.tests[0].message if result.tests else "sandbox error"
        return {**base, "status": "SandboxError", "message": message}
    if result.verdict is Verdict.CE:
        compile_result = _command("Finished", 0.0, 1, "", result.compile_output)
        return {**base, "status": "Failed", "message": "", "compile_result": compile_result}
    if program.language == "cpp":
        base["compile_result"] = _command("Finished", 0.0, 0, "", result.compile_output)
    test = result.tests[0]
    status = "TimeLimitExceeded" if test.verdict is Verdict.TLE else "Finished"
    code = test.exit_code if test.exit_code is not None else (None if status != "Finished" else -9)
    # SandboxFusion's execution_time is wall-clock (process start to exit); CPU time is extra.
    run = _command(status, test.wall_time_s, code, test.stdout, test.stderr or test.message)
    run["cpu_time"] = round(test.time_s, 4)
    ok = test.verdict is Verdict.OK
    return {**base, "status": "Success" if ok else "Failed", "message": "", "run_result": run}


def _command(
    status: str, seconds: float, code: int | None, stdout: str, stderr: str
) -> dict[str, Any]:
    return {
        "status": status,
        "execution_time": round(seconds, 4),
        "return_code": code,
        "stdout": stdout,
        "stderr": stderr,
    }
