"""One sandbox session per episode, for tool envs: opened at reset, closed on every exit path.

    self.session = EpisodeSession(backend="bubblewrap", max_sessions=32)
    ws = await self.session.open(SessionLimits(cpu_s=60))   # in on_start
    out = await self.session.call("exec", "ls", timeout_s=5, on_budget_spent=self.end_episode)
    text = await self.session.read_text("/workspace/repo/a.py")  # a tool's file access
    await self.session.close()                              # in on_close (idempotent)

The session comes from `sandbox.session(...)` (a shared pool per event loop and backend, with a
cap on live sessions and backpressure). A session that cannot start or breaks raises InfraError:
the trajectory is an error, never a reward of 0. A spent session budget is the model's doing: the
call fails with a ToolError the model sees, the env ends the episode, `budget_exhausted` is set.
A file a tool cannot read or write (missing, a directory, no permission) is the model's doing too:
a ToolError naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from envs.errors import InfraError
from envs.tools.env import ToolError

__all__ = ["EpisodeSession"]


class EpisodeSession:
    def __init__(self, backend: str = "auto", **pool_options: Any) -> None:
        self.backend = backend
        self.pool_options = pool_options
        self._cm: Any = None
        self.ws: Any = None
        self.budget_exhausted = False  # this episode spent the session's budget (until `open`)

    async def open(self, limits: Any, **options: Any) -> Any:
        """A new session; `options` add to the pool's (e.g. image=... for its own image)."""
        import sandbox

        await self.close()  # a reset without a close: never leak the last episode's session
        self.budget_exhausted = False
        try:
            pool_options = {**self.pool_options, **options}
            self._cm = sandbox.session(limits, backend=self.backend, **pool_options)
            self.ws = await self._cm.__aenter__()
        except sandbox.SandboxError as exc:
            self._cm = None
            raise InfraError(f"could not start a sandbox session: {exc}") from exc
        return self.ws

    async def call(
        self,
        kind: Literal["exec", "python"],
        source: str,
        *,
        timeout_s: float,
        on_budget_spent: Callable[[], None],
        budget_message: str = "the session's compute budget is spent ({exc})",
    ) -> str:
        """Run a shell command or Python code in the session; its rendered output.

        A spent compute budget sets `budget_exhausted` and calls `on_budget_spent` (the env ends
        its episode): the call that spent it returns its output, a later one fails with
        `budget_message` as a ToolError."""
        from sandbox import SandboxError
        from sandbox.sessions.api import SessionBudgetExceeded

        ws = self.require()
        try:
            result = await getattr(ws, kind)(source, timeout_s=timeout_s)
        except SessionBudgetExceeded as exc:
            self.budget_exhausted = True
            on_budget_spent()
            raise ToolError(budget_message.format(exc=exc)) from exc
        except SandboxError as exc:
            raise InfraError(f"sandbox session failed: {exc}") from exc
        if result.budget_exhausted:  # this call crossed the line: the next one would raise
            self.budget_exhausted = True
            on_budget_spent()
        return result.render() or "(no output)"

    async def read_text(self, path: str, *, shown: str | None = None) -> str:
        """The file at `path` in the session as text (undecodable bytes replaced). A file that
        cannot be read is a ToolError naming `shown` (default `path`), the name the model used."""
        from sandbox import SandboxError

        try:
            data = await self.require().read_file(path)
        except (FileNotFoundError, IsADirectoryError, ValueError, PermissionError) as exc:
            raise ToolError(f"cannot read {shown or path}: {type(exc).__name__}: {exc}") from exc
        except SandboxError as exc:
            raise InfraError(f"sandbox session failed: {exc}") from exc
        return data.decode("utf-8", errors="replace")

    async def write_text(self, path: str, content: str, *, shown: str | None = None) -> None:
        """Write `content` to `path` in the session; a file that cannot be written (a
        directory, no permission, a full disk) is a ToolError naming `shown` (default `path`)."""
        from sandbox import SandboxError

        try:
            await self.require().write_file(path, content)
        except (IsADirectoryError, ValueError, OSError) as exc:
            raise ToolError(f"cannot write {shown or path}: {type(exc).__name__}: {exc}") from exc
        except SandboxError as exc:
            raise InfraError(f"sandbox session failed: {exc}") from exc

    def require(self) -> Any:
        if self.ws is None:
            raise RuntimeError("this env's tools need `await env.areset(...)` first")
        return self.ws

    async def close(self) -> None:
        cm, self._cm, self.ws = self._cm, None, None
        if cm is not None:
            await cm.__aexit__(None, None, None)
