"""`python -m sandbox serve`: one instance of the sandbox service (a fleet member).

    GSPO_SANDBOX_TOKEN=... python -m sandbox serve --host 0.0.0.0 --port 8080 \\
        --backend docker --max-concurrency 8 --max-sessions 32

Binds 127.0.0.1 by default; any other address needs a token (--token-file or
$GSPO_SANDBOX_TOKEN), checked in constant time on every request but GET /health. SIGTERM drains:
no new connections, in-flight requests finish (up to --drain-timeout-s), then every session and
warm sandbox is destroyed, and the process exits 0 (uvicorn re-raises the SIGTERM it deferred;
`serve` turns that into a clean exit, so an orchestrator sees a drain as a success).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

from sandbox.core import LOCAL_BACKENDS, Sandbox
from sandbox.service.auth import TOKEN_ENV, TokenError, check_bind, load_token
from sandbox.service.requests import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, ServiceConfig
from sandbox.sessions.pool import SESSION_BACKENDS

EXIT_OK, EXIT_USAGE = 0, 2
# Idle keep-alive connections live this long; clients expire theirs sooner (remote.py), so a
# request is never sent on a connection the server is closing (an ambiguous loss, see remote.py).
KEEP_ALIVE_S = 30


def add_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve", help="HTTP service: /judge, SandboxFusion's /run_code, sessions"
    )
    serve.add_argument("--host", default="127.0.0.1", help="beyond loopback only with a token")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--backend", default="auto", choices=LOCAL_BACKENDS)
    serve.add_argument("--allow-unsafe-local", action="store_true")
    serve.add_argument("--max-concurrency", type=int, default=4)
    serve.add_argument("--max-queue", type=int, default=256)
    serve.add_argument(
        "--token-file", help=f"file holding the bearer token (else ${TOKEN_ENV}, else none)"
    )
    serve.add_argument(
        "--max-sessions", type=int, default=0, help="live sessions at most (0: no /sessions)"
    )
    serve.add_argument("--session-backend", default="auto", choices=SESSION_BACKENDS)
    serve.add_argument("--session-warm", type=int, default=0, help="warm session sandboxes")
    serve.add_argument(
        "--session-idle-s", type=float, default=900.0, help="close sessions idle this long"
    )
    serve.add_argument(
        "--header-timeout-s",
        type=float,
        default=HEADER_TIMEOUT_S,
        help="a request's headers must arrive within this (else 408, connection closed)",
    )
    serve.add_argument(
        "--body-timeout-s",
        type=float,
        default=BODY_TIMEOUT_S,
        help="a request's body must arrive within this (else 408); admitted only once read",
    )
    serve.add_argument(
        "--drain-timeout-s",
        type=float,
        default=900.0,
        help="on SIGTERM, wait this long for in-flight requests before cancelling them",
    )
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from sandbox.service.deadlines import with_header_timeout
    from sandbox.service.server import build_app
    from sandbox.service.session_routes import SessionCaps, SessionService
    from sandbox.sessions.pool import SessionPool

    for flag in ("header_timeout_s", "body_timeout_s"):
        if not getattr(args, flag) > 0:
            print(f"error: --{flag.replace('_', '-')} must be positive", file=sys.stderr)
            return EXIT_USAGE
    try:
        token = load_token(args.token_file)
        check_bind(args.host, token)
    except TokenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sock = bind_port(args.host, args.port)  # before "serving on": a busy port fails first
    except OSError as exc:
        print(
            f"error: cannot listen on {args.host}:{args.port} ({exc.strerror}): another server "
            "holds it? choose another with --port N",
            file=sys.stderr,
        )
        return EXIT_USAGE
    sandbox = Sandbox.create(
        args.backend,
        max_concurrency=args.max_concurrency,
        allow_unsafe_local=args.allow_unsafe_local,
    )
    sessions = None
    if args.max_sessions > 0:
        pool = SessionPool(
            args.session_backend, max_sessions=args.max_sessions, warm=args.session_warm
        )
        sessions = SessionService(pool, SessionCaps(idle_s=args.session_idle_s))
    app = build_app(
        sandbox,
        ServiceConfig(max_queue=args.max_queue, body_timeout_s=args.body_timeout_s),
        owns_sandbox=True,
        token=token,
        sessions=sessions,
    )
    print(
        f"serving the {sandbox.backend_name} sandbox on http://{args.host}:{sock.getsockname()[1]} "
        f"(/judge, /run_code, /capacity, /health{', /sessions' if sessions else ''}; "
        f"token: {'required' if token else 'none, loopback only'})",
        file=sys.stderr,
    )
    with _sigterm_ends_cleanly():
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            timeout_graceful_shutdown=args.drain_timeout_s,
            timeout_keep_alive=KEEP_ALIVE_S,
            http=with_header_timeout(args.header_timeout_s),
        )
        uvicorn.Server(config).run(sockets=[sock])
    return EXIT_OK


def bind_port(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class _Terminated(BaseException):
    """SIGTERM outside uvicorn's own handling: after its drain (re-raised) or before it serves.
    A BaseException, so that no `except Exception` on the way swallows it."""


@contextlib.contextmanager
def _sigterm_ends_cleanly() -> Iterator[None]:
    """Uvicorn handles SIGTERM while it serves (the drain), then restores the handler it found
    and raises the signal again; the handler found is this one, which ends `serve` with 0."""

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    except _Terminated:
        print("sandbox service: drained after SIGTERM, exiting", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
