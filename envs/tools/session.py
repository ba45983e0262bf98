"""One sandbox session per episode, for tool envs: opened at reset, closed on every exit path.

    self.session = EpisodeSession(backend="bubblewrap", max_sessions=32)
    ws = await self.session.open(SessionLimits(cpu_s=60))   # in on_start
    await self.session.close()                              # in on_close (idempotent)

The session comes from `sandbox.session(...)` (a shared pool per event loop and backend, with a
cap on live sessions and backpressure). A session that cannot start raises InfraError: the
trajectory is an error, never a reward of 0.
"""

from __future__ import annotations

from typing import Any

from envs.errors import InfraError

__all__ = ["EpisodeSession"]


class EpisodeSession:
    def __init__(self, backend: str = "auto", **pool_options: Any) -> None:
        self.backend = backend
        self.pool_options = pool_options
        self._cm: Any = None
        self.ws: Any = None

    async def open(self, limits: Any) -> Any:
        import sandbox

        await self.close()  # a reset without a close: never leak the last episode's session
        try:
            self._cm = sandbox.session(limits, backend=self.backend, **self.pool_options)
            self.ws = await self._cm.__aenter__()
        except sandbox.SandboxError as exc:
            self._cm = None
            raise InfraError(f"could not start a sandbox session: {exc}") from exc
        return self.ws

    def require(self) -> Any:
        if self.ws is None:
            raise RuntimeError("this env's tools need `await env.areset(...)` first")
        return self.ws

    async def close(self) -> None:
        cm, self._cm, self.ws = self._cm, None, None
        if cm is not None:
            await cm.__aexit__(None, None, None)
