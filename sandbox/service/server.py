"""The sandbox as an HTTP service (starlette): our judge endpoint and a SandboxFusion-compatible one.

    GET  /health     {"status": "ok" | "draining"} (503 while draining); needs no token
    GET  /capacity   {"backend", "max_concurrency", "max_queue", "in_flight", "served",
                     "sessions": {"backend", "max_sessions", "live"} | null, "draining"}
    POST /judge      a program + tests (or function-style tests) -> verdicts (see `parse_judge`)
    POST /run_code   SandboxFusion's request/response shape: {code, language, stdin,
                     compile_timeout, run_timeout, memory_limit_MB} -> {status, message,
                     compile_result, run_result: {status, execution_time, return_code, stdout,
                     stderr}, executor_pod_name, files}

Admission control: at most max_concurrency runs execute and max_queue wait; beyond that a
request gets 429 with Retry-After at once (back-pressure, not an unbounded backlog). A request is
admitted only once its body is read: headers must arrive within 10 s (deadlines.py), the body
within body_timeout_s (30 s; else 408), so stalled clients never hold a slot. Bodies over
max_body_bytes get 413 before they are read in full. Malformed requests get 400 with a JSON
{"error"} naming the field; an internal error is a JSON 500, never plain text.


Every limit a client sends is checked and capped (sandbox/service/requests.py, ServiceConfig).

Sessions (`/sessions/...`, sandbox/service/session_routes.py) are served when the app is given
a SessionService. With a token (sandbox/service/auth.py) every endpoint but /health needs
`Authorization: Bearer <token>`; `python -m sandbox serve` refuses to bind beyond loopback
without one. Draining (SIGTERM): uvicorn stops accepting connections and lets in-flight requests
finish; then the lifespan closes every session and the sandbox.

The service executes code only through the Sandbox it was given; it binds to 127.0.0.1 unless
told otherwise and has no endpoint that touches the host.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sandbox.core import Sandbox
from sandbox.service.auth import BearerAuth
from sandbox.service.requests import (
    BadRequest,
    ServiceConfig,
    SlowBody,
    TooLarge,
    parse_judge,
    parse_run_code,
    read_json,
)
from sandbox.service.session_routes import SessionService
from sandbox.types import Program, RunResult, TestResult, Verdict

__all__ = ["BadRequest", "ServiceConfig", "build_app", "fusion_response", "result_json"]

log = logging.getLogger("sandbox.service.server")


def build_app(
    sandbox: Sandbox,
    config: ServiceConfig | None = None,
    *,
    owns_sandbox: bool = False,
    token: str | None = None,
    sessions: SessionService | None = None,
) -> Any:
    """The ASGI app; with owns_sandbox it closes `sandbox` when the server shuts down (and
    `sessions`, which it always owns). With a token, BearerAuth guards every path but /health."""
    config = config or ServiceConfig()
    state = {"pending": 0, "served": 0, "draining": False}
    capacity = sandbox.max_concurrency + config.max_queue

    async def read_body(request: Request, limit: int) -> dict[str, Any]:
        return await read_json(request, limit, config.body_timeout_s)

    async def admitted(request: Request, handler: Any) -> JSONResponse:
        # The body first: a request is admitted (counted as pending) only once it is read, so
        # clients that stall their uploads hold a connection (until body_timeout_s), never a
        # slot that a legitimate request would then be refused for.
        try:
            body = await read_body(request, config.max_body_bytes)
        except SlowBody as exc:
            return JSONResponse({"error": str(exc)}, status_code=408)
        except TooLarge as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if state["pending"] >= capacity:
            return JSONResponse(
                {"error": "sandbox queue is full, retry later"},
                status_code=429,
                headers={"Retry-After": str(config.retry_after_s)},
            )
        if state["draining"]:
            return JSONResponse({"error": "this sandbox instance is draining"}, status_code=503)
        state["pending"] += 1
        try:
            reply = JSONResponse(await handler(body))
            state["served"] += 1
            return reply
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
        if state["draining"]:
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def capacity_info(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "backend": sandbox.backend_name,
                "max_concurrency": sandbox.max_concurrency,
                "max_queue": config.max_queue,
                "in_flight": state["pending"],
                "served": state["served"],
                "sessions": sessions.capacity() if sessions is not None else None,
                "draining": state["draining"],
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if sessions is not None:
            await sessions.start()
        try:
            yield
        finally:
            state["draining"] = True
            if sessions is not None:
                await sessions.aclose()
            if owns_sandbox:
                await sandbox.aclose()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/capacity", capacity_info, methods=["GET"]),
        Route("/judge", judge, methods=["POST"]),
        Route("/run_code", run_code, methods=["POST"]),
    ]
    if sessions is not None:
        routes += sessions.routes(read_body)
    app = Starlette(routes=routes, lifespan=lifespan)
    return BearerAuth(app, token) if token is not None else app


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
