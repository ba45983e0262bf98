"""The sandbox service's requests: reading a JSON body within a size cap, and parsing /judge and
/run_code bodies into the library's records, every client-sent limit checked and capped.

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

A malformed request raises BadRequest (the server answers 400 with its message), a body over
max_body_bytes raises TooLarge (413), one not received within body_timeout_s raises SlowBody
(408: a stalled upload holds its connection that long at most, and never an admission slot). This module runs nothing and knows nothing of HTTP routing
(sandbox/service/server.py).
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from sandbox.judging.functional import function_call
from sandbox.types import LANGUAGES, JudgeSpec, Limits, Program, TestCase

LANGUAGE_ALIASES = {
    "python": "python",
    "python3": "python",
    "py": "python",
    "cpp": "cpp",
    "c++": "cpp",
    "cxx": "cpp",
    "cpp17": "cpp",
}


HEADER_TIMEOUT_S = 10.0  # enforced by the HTTP protocol (deadlines.py), answered 408
BODY_TIMEOUT_S = 30.0  # enforced by read_json, answered 408


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
    header_timeout_s: float = HEADER_TIMEOUT_S  # a request's headers arrive within this
    body_timeout_s: float = BODY_TIMEOUT_S  # and its whole body within this, after them


class BadRequest(ValueError):
    """A malformed request: answered with 400 and this message."""


class TooLarge(ValueError):
    pass


class SlowBody(ValueError):
    """The body did not arrive within the deadline: answered with 408."""


async def read_json(
    request: Request, limit: int, timeout_s: float = BODY_TIMEOUT_S
) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"request body of {declared} bytes exceeds the {limit}-byte limit")
    chunks: list[bytes] = []

    async def collect() -> None:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"request body exceeds the {limit}-byte limit")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout_s)
    except asyncio.TimeoutError as exc:
        got = sum(map(len, chunks))
        raise SlowBody(
            f"request body not received within {timeout_s:g} s ({got} bytes arrived); "
            "send it at once, as one request"
        ) from exc
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


JUDGE_KEYS = {"language", "source", "tests", "limits", "judge", "early_stop", "function", "entry"}


def parse_judge(
    body: dict[str, Any], config: ServiceConfig
) -> tuple[Program, list[TestCase], Limits, JudgeSpec, bool]:
    """{"language", "source", "tests": [{"stdin", "expected"?}] or with "function": name
    [{"args" | "kwargs", "expected"?}], "limits"?: {...}, "judge"?: {"mode", "abs_tol",
    "rel_tol", "checker": {"language", "source"}, "checker_protocol", "checker_args",
    "case_sensitive", "space_change_sensitive"}, "early_stop"?: bool}. The `remote` backend
    sends a function-style Program as "entry" with its already-encoded tests (stdin/expected)."""
    _check_keys(body, JUDGE_KEYS, "the request")
    language = parse_language(_field(body, "language", str))
    source = _field(body, "source", str)
    raw_tests = _field(body, "tests", list)
    if not raw_tests or len(raw_tests) > config.max_tests:
        raise BadRequest(f"'tests' must hold 1..{config.max_tests} tests, got {len(raw_tests)}")
    if not all(isinstance(t, dict) for t in raw_tests):
        raise BadRequest("every test must be a JSON object")
    function = _field(body, "function", str, None)
    entry = _field(body, "entry", str, None)
    if function is not None and entry is not None:
        raise BadRequest("give 'function' (raw cases) or 'entry' (encoded tests), not both")
    if entry is not None:
        program = Program(language, source, entry=entry)  # type: ignore[arg-type]
        tests = [_stdin_test(t, i) for i, t in enumerate(raw_tests)]
    elif function is not None:
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


JUDGE_SPEC_KEYS = {
    "mode",
    "abs_tol",
    "rel_tol",
    "checker",
    "checker_protocol",
    "checker_args",
    "case_sensitive",
    "space_change_sensitive",
}


def _judge_spec(raw: dict[str, Any]) -> JudgeSpec:
    _check_keys(raw, JUDGE_SPEC_KEYS, "judge")
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
        checker_protocol=_field(raw, "checker_protocol", str, "testlib", where="judge."),
        checker_args=tuple(_strings(raw, "checker_args")),
        case_sensitive=_field(raw, "case_sensitive", bool, True, where="judge."),
        space_change_sensitive=_field(raw, "space_change_sensitive", bool, False, where="judge."),
    )


def _strings(raw: dict[str, Any], name: str) -> list[str]:
    values = _field(raw, name, list, [], where="judge.")
    if not all(isinstance(v, str) for v in values):
        raise BadRequest(f"field 'judge.{name}' must be a list of strings")
    return values


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
