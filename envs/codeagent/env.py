"""CodeAgent-v0: fix a bug (or fill a stub) in a small Python repository with tools.

Each episode gets its own sandbox session (`sandbox.session`), opened at `areset`, with the task's
repository uploaded to /workspace/repo. Tools (Qwen3/Hermes tool calls): `bash`, `read_file`,
`write_file`, `str_replace` (replace one unique snippet), `run_tests` (the visible tests only) and
`submit`. The episode ends at `submit`, at a turn without tool calls, or at the turn limit; the
rollout's context budget (`rollout.max_context_tokens`) is its token budget.

Reward: 1 when every hidden case passes (resolved), else 0; with `partial_credit=True` the
fraction that pass. Plus, if `format_reward` > 0, that weight times the share of the episode's
tool calls that parsed (a shaping term for models too small to write a valid call reliably; 0 by
default). Grading (envs/codeagent/grader.py) kills every process the agent left, reads only the
graded module's text from the workspace and runs the hidden checks in a fresh sandbox run behind
the function harness's trusted parent: the hidden cases never exist in the session, their
expected values never reach the module's process, and nothing the agent did to its workspace
(permissions, a full disk, planted modules, printed result lines, lingering processes) can make
grading raise or pass. `info["grade_reason"]` says why an episode did not resolve.

The sandbox's own failures (BackendFailure, Verdict.SE, a session that will not start) raise
InfraError: the trajectory is an error, never a 0. A session budget the agent spends is the
agent's doing: the episode ends, is graded as it stands, and `info["budget_exhausted"]` is set.
The judging sandbox is the trainer's shared one (`sandbox=`); without one the env creates its own
with the session's backend and closes it in `aclose`.

MCP tools: `mcp_server="PYTHONPATH=/workspace/.mcp python3 server.py"` (with `mcp_files`, a local
directory uploaded to /workspace/.mcp: the server and what it imports) adds the tools of that
MCP stdio server, run inside the episode's session as McpToolEnv runs one (envs/tools/mcp_env.py),
to CodeAgent's own; a name that clashes with one of ours is refused.

Metrics (`info["env_metrics"]`): turns, tool calls, tool-call attempts, parse failures, tool
errors, parse_ok_frac, and at the end hidden_pass_frac and submitted.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

from envs.base import Message
from envs.codeagent.grader import grade
from envs.codeagent.tasks import TIERS, build_tasks
from envs.errors import InfraError
from envs.tools import ToolEnv, ToolError, tool
from envs.tools.session import EpisodeSession
from envs.tools.trajectory import plan_turns, tool_call

REPO = "/workspace/repo"
SYSTEM_PROMPT = "Fix the Python repository in /workspace/repo, then call submit."


class CodeAgentEnv(ToolEnv):
    """Repository-fixing agent env; see the module docstring."""

    needs_sandbox = True  # grades in a fresh sandbox run: the trainer passes a shared sandbox
    max_tool_calls_per_turn = 4
    max_tool_output_chars = 1500
    uses_sessions = True  # under sandbox=remote the trainer sets backend= and session_options=

    def __init__(
        self,
        *,
        max_turns: int = 4,
        tiers: list[str] | None = None,
        backend: str = "auto",
        session_options: dict[str, Any] | None = None,
        exec_timeout_s: float = 10.0,
        session_cpu_s: float = 60.0,
        max_tool_calls_per_turn: int | None = None,
        max_tool_output_chars: int | None = None,
        tools: list[str] | None = None,
        format_reward: float = 0.0,
        partial_credit: bool = False,
        mcp_server: str | None = None,
        mcp_files: str | None = None,
        sandbox: Any | None = None,
    ) -> None:
        super().__init__(
            max_turns,
            max_tool_calls_per_turn=max_tool_calls_per_turn,
            max_tool_output_chars=max_tool_output_chars,
            tools=tools,
        )
        bad = [t for t in tiers or [] if t not in TIERS]
        if bad:
            raise ValueError(f"CodeAgent tiers {bad} unknown; choose from {list(TIERS)}")
        self.tiers = list(tiers) if tiers else list(TIERS)
        self.session = EpisodeSession(backend, **(session_options or {}))
        if not 0.0 <= format_reward <= 1.0:
            raise ValueError(f"format_reward must be within [0, 1], got {format_reward}")
        self.format_reward = format_reward
        self.partial_credit = bool(partial_credit)
        self._sandbox, self._owns_sandbox = sandbox, sandbox is None
        self._backend = backend
        self.exec_timeout_s = exec_timeout_s
        self.session_cpu_s = session_cpu_s
        if mcp_server is not None and not mcp_server.strip():
            raise ValueError("mcp_server: the shell command that starts the MCP stdio server")
        if mcp_files is not None and not Path(mcp_files).is_dir():
            raise ValueError(f"mcp_files={mcp_files!r}: not a local directory")
        self.mcp_server, self.mcp_files = mcp_server, mcp_files
        self.mcp: Any = None  # the episode's McpTools (envs/tools/mcp.py) with an mcp_server
        self._own_tools = dict(self._tools)  # ours; each episode adds the server's to them
        self._submitted = False
        self._edits = 0  # edit calls with valid arguments this episode
        self._last: dict[str, Any] = {}

    # -- data -----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        return [t for t in build_tasks() if t["split"] == split and t["tier"] in self.tiers]

    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": task["issue"]},
        ]

    def reference_response(self, task: dict[str, Any]) -> str | list[str]:
        """The cold start's turns: read the module, run the tests, fix it (str_replace), run the
        tests again, submit, with the tools this env offers, within max_turns. With only
        str_replace and submit offered (configs/env/codeagent.yaml) there is nothing to look at
        or run: one turn, the fix and submit."""
        return reference_turns(
            task, self._tools, max_turns=self.max_turns, max_calls=self.max_tool_calls_per_turn
        )

    # -- session --------------------------------------------------------------------------------
    async def on_start(self) -> None:
        from sandbox import SandboxError
        from sandbox.sessions.api import SessionLimits

        task = self._require_task()
        self._submitted, self._last, self._edits = False, {}, 0
        limits = SessionLimits(exec_timeout_s=self.exec_timeout_s, cpu_s=self.session_cpu_s)
        ws = await self.session.open(limits)
        try:
            with tempfile.TemporaryDirectory(prefix="codeagent-") as tmp:
                for path, text in task["files"].items():
                    (Path(tmp) / path).parent.mkdir(parents=True, exist_ok=True)
                    (Path(tmp) / path).write_text(text)
                await ws.upload(tmp, "repo")  # the task's repository, hidden tests not in it
            # No bytecode caches: a same-size edit within a second would run stale .pyc files.
            await ws.exec(f"cd {REPO} && export PYTHONDONTWRITEBYTECODE=1")
            if self.mcp_files is not None:
                await ws.upload(self.mcp_files, ".mcp")  # /workspace/.mcp: the server's files
        except SandboxError as exc:
            await self.session.close()
            raise InfraError(f"CodeAgent could not set up its workspace: {exc}") from exc
        self._tools = dict(self._own_tools)
        if self.mcp_server is not None:
            try:
                await self._add_mcp_tools(ws)
            except BaseException:
                await self.on_close()
                raise

    async def _add_mcp_tools(self, ws: Any) -> None:
        """The MCP server's tools beside ours, run inside this episode's session (McpToolEnv's
        machinery: each request one `exec` of the server; a server that fails is InfraError)."""
        from envs.tools.mcp import McpTools, tool_from_mcp
        from envs.tools.mcp_session import MODERN, session_stdio

        assert self.mcp_server is not None  # only called when the env was given a server
        transport = session_stdio(ws, self.mcp_server, timeout_s=self.exec_timeout_s)
        self.mcp = McpTools(
            transport, name="CodeAgent's MCP server", timeout_s=self.exec_timeout_s + 30,
            mode=MODERN,
        )  # fmt: skip
        listed = await self.mcp.open()
        clash = sorted(t.name for t in listed if t.name in self._tools)
        if clash:
            raise ValueError(
                f"env.kwargs.mcp_server={self.mcp_server!r} offers {clash}, which CodeAgent's own "
                "tools already name; rename them in the server or drop ours with env.kwargs.tools"
            )
        self._tools.update({t.name: tool_from_mcp(t, self.mcp.call) for t in listed})

    async def on_close(self) -> None:
        from envs.tools.mcp import close_mcp_then_session

        mcp, self.mcp = self.mcp, None
        await close_mcp_then_session(mcp, self.session)

    async def _judge(self) -> Any:
        """The sandbox that runs the hidden checks (created on first use when none was passed)."""
        if self._sandbox is None:
            from sandbox import Sandbox, SandboxError

            try:
                self._sandbox = await asyncio.to_thread(Sandbox.create, self._backend)  # type: ignore[arg-type]
            except SandboxError as exc:
                raise InfraError(f"could not create CodeAgent's grading sandbox: {exc}") from exc
        return self._sandbox

    async def aclose(self) -> None:
        try:
            await self.on_close()
        finally:
            if self._owns_sandbox and self._sandbox is not None:
                judge, self._sandbox = self._sandbox, None
                await judge.aclose()

    async def _exec(self, command: str) -> str:
        return await self.session.call(
            "exec",
            command,
            timeout_s=self.exec_timeout_s,
            on_budget_spent=self.end_episode,
            budget_message="the session's compute budget is spent ({exc}); the episode ends",
        )

    def _session(self) -> Any:
        return self.session.require()

    # -- tools ----------------------------------------------------------------------------------
    @tool
    async def bash(self, command: str) -> str:
        """Run a shell command in the repository.

        Args:
            command: the command.
        """
        return await self._exec(command)

    @tool
    async def read_file(self, path: str) -> str:
        """Read a file.

        Args:
            path: file path.
        """
        return (await self._read(path)) or "(empty file)"

    @tool
    async def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file.

        Args:
            path: file path.
            content: the new text.
        """
        self._edits += 1
        await self._write(path, content)
        return f"wrote {len(content)} characters to {path}"

    @tool
    async def str_replace(self, path: str, old: str, new: str) -> str:
        """Replace text that occurs exactly once in a file.

        Args:
            path: file path.
            old: exact text to replace.
            new: replacement text.
        """
        self._edits += 1
        text = await self._read(path)
        count = text.count(old) if old else 0
        if count != 1:
            where = "is empty" if not old else f"occurs {count} times in {path}"
            raise ToolError(f"old {where}; it must occur exactly once (quote it exactly)")
        await self._write(path, text.replace(old, new))
        return f"replaced 1 occurrence in {path}"

    @tool
    async def run_tests(self) -> str:
        """Run the tests."""
        return await self._exec(f"cd {REPO} && {self._require_task()['test_command']}")

    @tool
    async def submit(self) -> str:
        """Submit the fix (ends the episode)."""
        self._submitted = True
        self.end_episode()
        return "submitted"

    async def _read(self, path: str) -> str:
        return await self.session.read_text(_in_repo(path), shown=path)

    async def _write(self, path: str, content: str) -> None:
        await self.session.write_text(_in_repo(path), content, shown=path)

    # -- reward ---------------------------------------------------------------------------------
    async def final_reward(self, text: str | None) -> float:
        """1 when every hidden case passes, else 0 (partial_credit: the fraction that pass); see
        envs/codeagent/grader.py for why nothing the agent did can crash or forge it."""
        from sandbox import SandboxError

        task = self._require_task()
        try:
            result = await grade(
                self._session(), await self._judge(), task, early_stop=not self.partial_credit
            )
        except SandboxError as exc:
            raise InfraError(f"sandbox failed grading task {task['id']!r}: {exc}") from exc
        self._last.update(
            hidden_pass_frac=result.fraction,
            hidden_passed=list(result.passed),
            resolved=result.resolved,
            grade_reason=result.reason,
        )
        score = result.fraction if self.partial_credit else float(result.resolved)
        return score + self.format_reward * self._well_formed_frac()

    def _well_formed_frac(self) -> float:
        """Share of the episode's tool calls that parsed, 0 unless an edit (write_file or
        str_replace) was called with valid arguments: the optional shaping term, bounded, so many
        calls cannot earn more than one good one."""
        attempts = self.counters["tool_call_attempts"]
        if not attempts or not self._edits:  # `submit` alone must not earn it (a 200-step run
            return 0.0  # without this rule collapsed to calling only submit)
        return (attempts - self.counters["parse_failures"]) / attempts

    def final_info(self) -> dict[str, Any]:
        return {
            "submitted": self._submitted,
            "hidden_pass_frac": self._last.get("hidden_pass_frac", 0.0),
            "hidden_passed": self._last.get("hidden_passed", []),
            "budget_exhausted": self.session.budget_exhausted,
            "resolved": self._last.get("resolved", False),
            "grade_reason": self._last.get("grade_reason", "not graded"),
        }

    def _info(self, reward: float, end: str | None) -> dict[str, Any]:
        info = super()._info(reward, end)
        if end is not None:
            info["env_metrics"]["hidden_pass_frac"] = float(self._last.get("hidden_pass_frac", 0.0))
            info["env_metrics"]["submitted"] = float(self._submitted)
        return info


def reference_turns(
    task: dict[str, Any], tools: Collection[str], *, max_turns: int, max_calls: int
) -> str | list[str]:
    """See CodeAgentEnv.reference_response; built from the task's files and issue only."""
    ref = task["reference"]
    look = [tool_call("read_file", path=ref["path"])] if "read_file" in tools else None
    if look is None and "bash" in tools:
        look = [tool_call("bash", command=f"cat -n {REPO}/{ref['path']}")]
    tests = None
    if "run_tests" in tools:
        tests = [tool_call("run_tests")]
    elif "bash" in tools:
        tests = [tool_call("bash", command=f"cd {REPO} && {task['test_command']}")]
    if not (look or tests) or not {"str_replace", "submit"} <= set(tools):
        return reference_calls(task)
    return plan_turns(
        edits=[tool_call("str_replace", path=ref["path"], old=ref["old"], new=ref["new"])],
        max_calls=max_calls,
        max_turns=max_turns,
        look=look,
        reproduce=tests,
        verify=tests,
    )


def reference_calls(task: dict[str, Any]) -> str:
    """The fix as a str_replace, then submit, in one turn."""
    ref = task["reference"]
    fix = {
        "name": "str_replace",
        "arguments": {"path": ref["path"], "old": ref["old"], "new": ref["new"]},
    }
    return "\n".join(
        f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        for call in (fix, {"name": "submit", "arguments": {}})
    )


def _in_repo(path: str) -> str:
    return path if path.startswith("/") else f"{REPO}/{path}"
