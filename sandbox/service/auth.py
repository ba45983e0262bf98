"""The service's bearer token: where it comes from, how it is checked, and where it is required.

A request carries `Authorization: Bearer <token>`; the comparison is `hmac.compare_digest`
(constant time in the token's contents). Without a configured token the service answers
everyone, and `check_bind` refuses to start it on anything but a loopback address: a sandbox
that runs whatever code it is sent must never be open to a network.

`GET /health` is answered without a token (load balancers and Kubernetes probes call it); it
tells only whether the instance is up or draining.

The token comes from a file (`--token-file`, e.g. a mounted Kubernetes Secret) or the
environment (`GSPO_SANDBOX_TOKEN`), never from the command line (visible in `ps`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from starlette.responses import JSONResponse

TOKEN_ENV = "GSPO_SANDBOX_TOKEN"
MIN_TOKEN_CHARS = 16
OPEN_PATHS = frozenset({"/health"})


class TokenError(ValueError):
    """No usable token where one is needed; the message names the fix."""


def load_token(token_file: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The token from `token_file` if given, else from $GSPO_SANDBOX_TOKEN, else None."""
    env = os.environ if env is None else env
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise TokenError(f"--token-file {token_file}: cannot read it ({exc})") from exc
        where = f"--token-file {token_file}"
    else:
        token = env.get(TOKEN_ENV, "").strip()
        where = f"${TOKEN_ENV}"
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token:
        raise TokenError(
            f"{where}: the token must be at least {MIN_TOKEN_CHARS} printable characters "
            "without spaces (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token."""
    if token is None and not is_loopback(host):
        raise TokenError(
            f"refusing to bind {host!r} without a token: anyone who reaches it could run code. "
            f"Set ${TOKEN_ENV} or pass --token-file FILE, or bind 127.0.0.1"
        )


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an Authorization header carries the token (always true when there is none)."""
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


class BearerAuth:
    """ASGI middleware: 401 (JSON, `WWW-Authenticate: Bearer`) for a request without the
    token, on every path but OPEN_PATHS."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            headers = dict(scope.get("headers") or [])
            header = headers.get(b"authorization", b"").decode("latin-1")
            if not authorized(header, self.token):
                reply = JSONResponse(
                    {"error": "missing or wrong token (Authorization: Bearer <token>)"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)
