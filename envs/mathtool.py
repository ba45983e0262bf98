"""MathTool-v0: math with a Python tool. Multi-turn; the final `\\boxed{}` answer is verified.

Each assistant turn is handled as follows:
- it contains a `\\boxed{...}` answer -> the episode ends; scored like Math-v0 (math-verify);
- otherwise it contains a ```python code block and turns remain -> the LAST block runs in the
  sandbox (a fresh interpreter each time: nothing persists between blocks); its stdout and stderr,
  truncated, come back as the next observation message; reward 0 for the turn;
- a code block on the last allowed turn -> the episode is truncated (turn limit), reward 0;
- neither -> the episode ends with reward 0.
The sandbox's own failure (Verdict.SE) raises InfraError: the trajectory is an error, not a 0.
A program that crashes, times out or floods output is the model's doing: the model sees it.

Pass one shared `sandbox=` (the trainer does); without one, each env creates its own on first
use with `backend` and owns it (close it with `aclose()`).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from envs.errors import InfraError
from envs.math.boxed import clean_text, extract_boxed
from envs.math.env import MathEnv

TOOL_PROMPT = (
    "{question}\n\n"
    "You may run Python by writing a ```python code block; you will see what it prints. "
    "Put your final answer in \\boxed{{}}."
)
_CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


class MathToolEnv(MathEnv):
    """Math with a sandboxed Python tool, up to `max_turns` assistant turns."""

    needs_sandbox = True  # runs the model's Python: the trainer passes a shared sandbox

    def __init__(
        self,
        *,
        max_turns: int = 4,
        sandbox: Any | None = None,
        backend: str = "auto",
        allow_unsafe_local: bool = False,
        sandbox_options: dict[str, Any] | None = None,
        code_time_s: float = 5.0,
        code_memory_mb: int = 512,
        max_output_chars: int = 2000,
        observation_role: str = "user",
        prompt_template: str = TOOL_PROMPT,
        **math_kwargs: Any,
    ) -> None:
        super().__init__(prompt_template=prompt_template, max_turns=max_turns, **math_kwargs)
        if code_time_s <= 0 or code_memory_mb <= 0 or max_output_chars <= 0:
            raise ValueError(
                "code_time_s, code_memory_mb and max_output_chars must be > 0, got "
                f"{code_time_s}, {code_memory_mb}, {max_output_chars}"
            )
        if observation_role not in ("user", "tool"):
            raise ValueError(f"observation_role must be 'user' or 'tool', got {observation_role!r}")
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._sandbox_args = dict(
            backend=backend, allow_unsafe_local=allow_unsafe_local, **(sandbox_options or {})
        )
        self.code_time_s = code_time_s
        self.code_memory_mb = code_memory_mb
        self.max_output_chars = max_output_chars
        self.observation_role = observation_role
        self._closing: asyncio.Task | None = None

    # -- episode --------------------------------------------------------------------------------
    def step(self, action: str):
        """Synchronous step for plain Gymnasium loops; each call runs its own event loop."""
        return asyncio.run(self._step_then_release(action))

    async def astep(self, action: str):
        task = self._require_task()
        self.turn += 1
        if isinstance(action, str) and len(action) <= 1 << 16:
            parsed, code = _parse_turn(action)
        else:  # megabytes of output: parse off the event loop
            parsed, code = await asyncio.to_thread(_parse_turn, action)
        if parsed is not None:
            verification = None
            if len(parsed) <= self.max_answer_chars:
                verification = await self.pool.averify(
                    task["answer"], parsed, timeout_s=self.verify_timeout_s
                )
            messages, reward, terminated, truncated, info = self._finish(task, parsed, verification)
            return messages, reward, terminated, truncated, {**info, "turn": self.turn}
        if code is None:
            return [], 0.0, True, False, self._no_answer_info(task, "no_answer")
        if self.turn >= self.max_turns:
            return [], 0.0, False, True, self._no_answer_info(task, "turn_limit")
        output, verdict = await self._run_code(code)
        info = {"turn": self.turn, "tool_verdict": verdict, "turn_reward": 0.0}
        return [{"role": self.observation_role, "content": output}], 0.0, False, False, info

    def _no_answer_info(self, task: dict[str, Any], reason: str) -> dict[str, Any]:
        return {
            "parsed_answer": None,
            "format_ok": False,
            "answer_parsed": False,
            "correct": False,
            "gold": task["answer"],
            "turn_reward": 0.0,
            "turn": self.turn,
            "reason": reason,
        }

    # -- the tool -------------------------------------------------------------------------------
    async def _run_code(self, code: str) -> tuple[str, str]:
        """Run one code block; returns (observation text, verdict name)."""
        from sandbox import Limits, Program, SandboxError, TestCase, Verdict

        sandbox = await self._get_sandbox()
        limits = Limits(
            time_s=self.code_time_s,
            memory_mb=self.code_memory_mb,
            output_bytes=max(4 * self.max_output_chars, 1 << 14),
        )
        try:
            result = await sandbox.run(
                Program("python", code), [TestCase(stdin="", expected=None)], limits
            )
        except SandboxError as exc:  # the sandbox's own failure: infrastructure, not the model
            raise InfraError(f"sandbox failed running a tool call: {exc}") from exc
        if result.verdict == Verdict.CE:  # a syntax error: the model's to see and fix
            return self._observation("", result.compile_output, "CE"), "CE"
        if result.verdict == Verdict.SE or not result.tests:
            detail = result.tests[0].message if result.tests else result.compile_output
            raise InfraError(f"sandbox system error running a tool call: {detail}")
        test = result.tests[0]
        return self._observation(test.stdout, test.stderr, test.verdict.value), test.verdict.value

    def _observation(self, stdout: str, stderr: str, verdict: str) -> str:
        notes = {
            "TLE": f"[time limit of {self.code_time_s} s exceeded; the program was stopped]",
            "MLE": f"[memory limit of {self.code_memory_mb} MB exceeded]",
            "OLE": "[output limit exceeded; output cut]",
            "RE": "[the program exited with an error]",
            "CE": "[the code did not compile]",
        }
        parts = [f"```output\n{_truncate(stdout, self.max_output_chars)}```"]
        if stderr.strip():
            parts.append(f"stderr:\n```\n{_truncate(stderr, self.max_output_chars)}```")
        if verdict in notes:
            parts.append(notes[verdict])
        return "\n".join(parts)

    async def _get_sandbox(self):
        if self._sandbox is None:
            from sandbox import Sandbox, SandboxError

            try:
                self._sandbox = await asyncio.to_thread(Sandbox.create, **self._sandbox_args)
            except SandboxError as exc:
                raise InfraError(f"could not create a sandbox for MathTool-v0: {exc}") from exc
        return self._sandbox

    # -- lifecycle ------------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the sandbox if this env created it (a passed-in sandbox belongs to the caller)."""
        sandbox, self._sandbox = (
            (self._sandbox, None) if self._owns_sandbox else (None, self._sandbox)
        )
        if sandbox is not None:
            await sandbox.aclose()

    def close(self) -> None:
        if not (self._owns_sandbox and self._sandbox is not None):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.aclose())
            return
        self._closing = loop.create_task(self.aclose())  # kept: no fire-and-forget

    async def _step_then_release(self, action: str):
        try:
            return await self.astep(action)
        finally:
            await self.aclose()  # a sandbox made on this throwaway loop must not outlive it


def _parse_turn(action: object) -> tuple[str | None, str | None]:
    """(boxed answer, last python code block) of one assistant turn; None where absent."""
    text = clean_text(action)
    parsed = extract_boxed(text)
    return parsed, (None if parsed is not None else _last_code_block(text))


def _last_code_block(text: str) -> str | None:
    blocks = _CODE_BLOCK.findall(text)
    return blocks[-1] if blocks else None


def _truncate(text: str, limit: int) -> str:
    text = text if text.endswith("\n") or not text else text + "\n"
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]\n"
