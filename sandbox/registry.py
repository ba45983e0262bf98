"""The one seam between the library and the `remote` backend (issue 32, deliverable 6).

`sandbox/core.py` (`Sandbox.create("remote", ...)`) and `sandbox/sessions/pool.py`
(`session(backend="remote")`, `close_sessions()`) reach the remote backend only through
`remote()` here, never by importing the service package: the service package depends on core
and sessions (it subclasses Sandbox, serves SessionPools), not the other way round, so the
import graph has no circle (tests/sandbox/test_import_graph.py checks it statically).

The service package registers its implementation when it is imported (the last lines of
sandbox/service/remote.py); `remote()` imports it by name on first use.
"""

from __future__ import annotations

import importlib
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sandbox.core import Sandbox

REMOTE_MODULE = "sandbox.service.remote"


class RemoteBackend(Protocol):
    """What the library needs of the remote backend."""

    def sandbox(self, max_concurrency: int, **options: Any) -> Sandbox:
        """A Sandbox whose runs go to sandbox services (options: urls=[...], token=...)."""
        ...

    def session(self, limits: Any, options: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
        """A session on a sandbox service, from the shared remote sandbox for `options`."""
        ...

    async def close_shared(self) -> None:
        """Close the shared remote sandboxes `session` made on this event loop."""
        ...


_registered: list[RemoteBackend] = []


def register_remote(backend: RemoteBackend) -> None:
    _registered[:] = [backend]


def remote() -> RemoteBackend:
    """The registered remote backend, importing the service package on first use."""
    if not _registered:
        importlib.import_module(REMOTE_MODULE)  # registers itself
    if not _registered:
        raise RuntimeError(f"{REMOTE_MODULE} did not register the remote backend")
    return _registered[0]


def loaded_remote() -> RemoteBackend | None:
    """The remote backend if anything has used it (shutdown paths: no import for nothing)."""
    return _registered[0] if _registered else None
