"""Sessions: one persistent, isolated workspace per agent episode (exec, a Python kernel, files).

The contract (`api.py`), the pool that owns sessions and reaps orphans (`pool.py`) and the live
session it yields (`workspace.py`), the in-sandbox agent and kernel (`agent.py`, `agent_files.py`,
`agent_limits.py`, `agent_calls.py`, `kernel.py`, standard library only, they run inside the
sandbox) and the session backends (`backends/`). See docs/sandbox_sessions.md.
"""

from sandbox.sessions.pool import SessionPool, close_sessions, session

__all__ = ["SessionPool", "close_sessions", "session"]
