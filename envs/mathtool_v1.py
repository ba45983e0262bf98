"""MathTool-v1: math with a persistent Python tool, through tool calls (MathTool-v0 is unchanged).

The model calls `python(code)` (Qwen3/Hermes `<tool_call>` format); the code runs in the episode's
sandbox session kernel, so variables, imports and functions defined in one call are there in the
next. The call's output (stdout, stderr, the repr of a trailing expression; cut to
`max_tool_output_chars`, tail kept) comes back as a `tool` message. A turn without a tool call is
the final answer: its last `\\boxed{}` is checked by math-verify as in Math-v0 (reward 1 or 0).
Turn limit without an answer: truncated, reward 0.

The session (`sandbox.session`) is opened at `areset` and closed by `aclose` on every exit path.
A session that will not start or breaks raises InfraError (trajectory error, never a 0); code that
times out or spends the session's CPU budget is the model's: it sees the message (and a spent
budget ends the episode with reward 0, `info["budget_exhausted"]`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.base import Message
from envs.errors import TaskError
from envs.math.boxed import aextract_answer
from envs.math.env import MathEnv
from envs.tools import ToolEnv, tool
from envs.tools.session import EpisodeSession

PROMPT = "{question}\n\nUse the python tool if it helps. Put your final answer in \\boxed{{}}."


class MathToolV1Env(ToolEnv):
    """Math with a persistent Python kernel as a tool; see the module docstring."""

    max_tool_calls_per_turn = 2
    max_tool_output_chars = 1000
    uses_sessions = True  # under sandbox=remote the trainer sets backend= and session_options=

    def __init__(
        self,
        *,
        max_turns: int = 4,
        train_path: str | Path | None = None,
        test_path: str | Path | None = None,
        prompt_template: str = PROMPT,
        backend: str = "auto",
        session_options: dict[str, Any] | None = None,
        code_time_s: float = 5.0,
        session_cpu_s: float = 60.0,
        max_tool_calls_per_turn: int | None = None,
        max_tool_output_chars: int | None = None,
        tools: list[str] | None = None,
        sandbox: Any | None = None,  # the trainer's shared judging sandbox: not used here
        **math_kwargs: Any,
    ) -> None:
        super().__init__(
            max_turns,
            max_tool_calls_per_turn=max_tool_calls_per_turn,
            max_tool_output_chars=max_tool_output_chars,
            tools=tools,
        )
        self.math = MathEnv(
            train_path=train_path,
            test_path=test_path,
            prompt_template=prompt_template,
            **math_kwargs,
        )
        self.session = EpisodeSession(backend, **(session_options or {}))
        self.code_time_s = code_time_s
        self.session_cpu_s = session_cpu_s
        self._outcome: dict[str, Any] = {}

    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        return self.math.load_tasks(split)

    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        return self.math.initial_messages(task)

    def reference_response(self, task: dict[str, Any]) -> str:
        return self.math.reference_response(task)

    # -- session --------------------------------------------------------------------------------
    async def on_start(self) -> None:
        from sandbox.sessions.api import SessionLimits

        self._outcome = {}
        await self.session.open(
            SessionLimits(exec_timeout_s=self.code_time_s, cpu_s=self.session_cpu_s)
        )

    async def on_close(self) -> None:
        await self.session.close()

    @tool
    async def python(self, code: str) -> str:
        """Run Python code in a persistent interpreter; variables persist between calls.

        Args:
            code: the code; the value of a final expression is printed.
        """
        return await self.session.call(
            "python", code, timeout_s=self.code_time_s, on_budget_spent=self.end_episode
        )

    # -- reward ---------------------------------------------------------------------------------
    async def final_reward(self, text: str | None) -> float:
        task = self._require_task()
        parsed = None if text is None else await aextract_answer(text)
        verification = None
        if parsed is not None and len(parsed) <= self.math.max_answer_chars:
            verification = await self.math.pool.averify(
                task["answer"], parsed, timeout_s=self.math.verify_timeout_s
            )
            if not verification.gold_ok:
                raise TaskError(
                    f"task {task.get('id')!r}: gold answer {task['answer']!r} unreadable"
                )
        correct = verification is not None and verification.correct
        self._outcome.update(parsed_answer=parsed, correct=correct, gold=task["answer"])
        return 1.0 if correct else 0.0

    def final_info(self) -> dict[str, Any]:
        return {
            "parsed_answer": self._outcome.get("parsed_answer"),
            "correct": bool(self._outcome.get("correct", False)),
            "gold": self._outcome.get("gold"),
            "budget_exhausted": self.session.budget_exhausted,
        }
