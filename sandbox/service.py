"""The sandbox as an HTTP service (starlette): our judge endpoint and a SandboxFusion-compatible one.

    GET  /health     {"status": "ok", "backend": ..., "in_flight": n}
    POST /judge      a program + tests (or function-style tests) -> verdicts (see `parse_judge`)
    POST /run_code   SandboxFusion's request/response shape: {code, language, stdin,
                     compile_timeout, run_timeout, memory_limit_MB} -> {status, message,
                     compile_result, run_result: {status, execution_time, return_code, stdout,
                     stderr}, executor_pod_name, files}

Admission control: at most max_concurrency runs execute and max_queue wait; beyond that a
request gets 429 with Retry-After at once (back-pressure, not an unbounded backlog). Bodies over
max_body_bytes get 413 before they are read in full. Malformed requests get 400 naming the
problem. The service executes code only through the Sandbox it was given; it binds to 127.0.0.1
unless told otherwise and has no endpoint that touches the host.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandbox.core import Sandbox
from sandbox.functional import function_call
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
    max_queue: int = 256  # requests waiting for a sandbox slot beyond those running
    max_body_bytes: int = 2 << 20
    max_tests: int = 1000
    max_time_s: float = 60.0
    max_memory_mb: int = 4096
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
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


# ---- request parsing ------------------------------------------------------------------------
def _field(
    body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = ...
) -> Any:
    if name not in body or body[name] is None:
        if default is ...:
            raise BadRequest(f"missing required field {name!r}")
        return default
    value = body[name]
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise BadRequest(f"field {name!r} must be a number, got a boolean")
    if not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise BadRequest(f"field {name!r} must be {want}, got {type(value).__name__}")
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


def _limits(raw: dict[str, Any], config: ServiceConfig) -> Limits:
    _check_keys(raw, {"time_s", "memory_mb", "output_bytes", "processes", "wall_time_s"}, "limits")
    limits = Limits(**raw)
    if limits.effective_wall_time_s > config.max_time_s or limits.time_s > config.max_time_s:
        raise BadRequest(f"time limits above the service maximum of {config.max_time_s}s")
    if limits.memory_mb > config.max_memory_mb:
        raise BadRequest(f"memory_mb above the service maximum of {config.max_memory_mb}")
    return limits


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
    limits = _limits(_field(body, "limits", dict, {}), config)
    spec = _judge_spec(_field(body, "judge", dict, {}))
    return program, tests, limits, spec, bool(_field(body, "early_stop", bool, False))


def _stdin_test(raw: dict[str, Any], index: int) -> TestCase:
    _check_keys(raw, {"stdin", "expected"}, f"tests[{index}]")
    stdin = _field(raw, "stdin", str, "")
    return TestCase(stdin=stdin, expected=_field(raw, "expected", str, None))


def _judge_spec(raw: dict[str, Any]) -> JudgeSpec:
    _check_keys(raw, {"mode", "abs_tol", "rel_tol", "checker"}, "judge")
    checker = None
    if raw.get("checker") is not None:
        c = _field(raw, "checker", dict)
        checker = Program(
            parse_language(c.get("language")),  # type: ignore[arg-type]
            _field(c, "source", str),
        )
    return JudgeSpec(
        mode=_field(raw, "mode", str, "tokens"),
        abs_tol=float(_field(raw, "abs_tol", (int, float), 1e-6)),
        rel_tol=float(_field(raw, "rel_tol", (int, float), 1e-6)),
        checker=checker,
    )


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
    run_timeout = float(_field(body, "run_timeout", (int, float), 10))
    memory = int(_field(body, "memory_limit_MB", (int, float), -1))
    _field(body, "compile_timeout", (int, float), 10)  # compile limits are the sandbox's own
    if not 0 < run_timeout <= config.max_time_s:
        raise BadRequest(f"run_timeout must be in (0, {config.max_time_s}], got {run_timeout}")
    memory = 1024 if memory <= 0 else memory
    if memory > config.max_memory_mb:
        raise BadRequest(f"memory_limit_MB above the service maximum of {config.max_memory_mb}")
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
    run = _command(status, test.time_s, code, test.stdout, test.stderr or test.message)
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
