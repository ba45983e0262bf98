"""Codeforces-v0: write a program for a competitive-programming problem; it is judged in the sandbox.

One episode: the prompt is the statement (with samples and limits); the model answers with one
```python or ```cpp block; the LAST block is judged on all tests (samples first, then hidden) by
`sandbox.Sandbox.run` under the problem's limits and judge spec. Reward 1.0 when every test
passes (reward_mode="fraction": the passed share). With max_turns > 1 a failing submission gets
feedback on the first failing SAMPLE (input, expected, got, verdict) and may resubmit; each turn's
hidden-test score is info["turn_reward"] and the terminating step's reward is the episode's.

Model mistakes (no code block, unknown language, oversized or non-UTF-8 program, CE/WA/TLE/...)
score 0 with a verdict in info. Sandbox failures (Verdict.SE, a dead backend, a closed sandbox)
raise envs.errors.InfraError: the trajectory is marked error, never scored 0.

Not here: task data (problems.py, openr1.py) and answer parsing (extract.py).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Literal

from envs.base import Message, TextEnv
from envs.codeforces.extract import NO_CODE, Extraction, extract_code
from envs.codeforces.loaders import load_source, parse_source
from envs.codeforces.problems import Problem, load_problemset, load_split
from envs.errors import InfraError, TaskError
from sandbox import JudgeSpec, Limits, Program, RunResult, Sandbox, TestCase, Verdict
from sandbox.core import BackendName
from sandbox.judging.functional import describe_function_test, function_program

log = logging.getLogger(__name__)

RewardMode = Literal["all", "fraction"]
FEEDBACK_CHARS = 600  # per field of a feedback message: enough to debug, small for tiny models
INSTRUCTION = (
    "Read from standard input and write to standard output. "
    "Answer with exactly one ```python or ```cpp code block."
)
FUNCTION_INSTRUCTION = "Answer with exactly one ```python code block that defines `{name}`."
_closing: set[asyncio.Task] = set()  # aclose tasks started by a sync close() inside a running loop


class CodeforcesEnv(TextEnv):
    """gspo/Codeforces-v0. kwargs: max_turns, reward_mode, sandbox (shared instance) or
    sandbox_backend + sandbox_options (a private one, created lazily), source ("FORMAT:PATH",
    e.g. "kattis:/data/nwerc2023"; formats in envs.codeforces.loaders; problems_dir and
    openr1_path are older spellings of "dir:PATH" and "openr1:PATH"), source_options (the
    loader's options), tiers (keep only these difficulty tiers of the shipped set or problems_dir,
    e.g. ["easy"]; None keeps all; a source is used whole),
    time_multiplier (scales every problem's time limit, e.g. 2 on a loaded machine)."""

    needs_sandbox = True  # judges the model's programs: the trainer passes a shared sandbox

    def __init__(
        self,
        max_turns: int = 1,
        reward_mode: RewardMode = "all",
        *,
        sandbox: Sandbox | None = None,
        sandbox_backend: BackendName = "auto",
        sandbox_options: dict[str, Any] | None = None,
        problems_dir: str | None = None,
        openr1_path: str | None = None,
        openr1_skip_unsupported: bool = False,
        tiers: list[str] | None = None,
        source: str | None = None,
        source_options: dict[str, Any] | None = None,
        time_multiplier: float = 1.0,
    ) -> None:
        super().__init__(max_turns=max_turns)
        if not time_multiplier > 0:
            raise ValueError(f"time_multiplier={time_multiplier!r} must be positive")
        if source is not None:
            parse_source(source)  # fail at construction on a bad spelling
        if reward_mode not in ("all", "fraction"):
            raise ValueError(
                f"reward_mode={reward_mode!r}; choose 'all' (1 if every test passes) or 'fraction'"
            )
        self.reward_mode = reward_mode
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._sandbox_backend = sandbox_backend
        self._sandbox_options = dict(sandbox_options or {})
        self._sandbox_lock = asyncio.Lock()
        self._problems_dir = problems_dir
        self._openr1_path = openr1_path
        self._openr1_skip = openr1_skip_unsupported
        self._tiers = list(tiers) if tiers else None
        self._source = source
        self._source_options = dict(source_options or {})
        self._time_multiplier = float(time_multiplier)
        self._problem: Problem | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # private loop of the sync step()

    # -- data -----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in ("train", "test"):
            raise ValueError(f"split={split!r}; Codeforces-v0 has 'train' and 'test'")
        if self._source:  # tiers name the shipped set's tiers: a source is used whole
            return [p.to_row() for p in load_source(self._source, split, **self._source_options)]
        if self._openr1_path:
            from envs.codeforces.openr1 import load_openr1

            problems = load_openr1(self._openr1_path, split, skip_unsupported=self._openr1_skip)
        elif self._problems_dir:
            root = Path(self._problems_dir)
            problems = (
                load_split(split, root)
                if (root / "splits.json").exists()
                else load_problemset(root)
            )
        else:
            problems = load_split(split)
        return [p.to_row() for p in _select_tiers(problems, self._tiers)]

    def reference_response(self, task: dict[str, Any]) -> str | None:
        source = (task.get("reference") or {}).get("python")
        return f"```python\n{source.strip()}\n```" if source else None

    # -- episode --------------------------------------------------------------------------------
    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        self._problem = Problem.from_row(task)
        return [{"role": "user", "content": render_prompt(self._problem)}]

    def step(self, action: str):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "CodeforcesEnv.step() was called inside a running event loop; "
                "use `await env.astep(action)` there"
            )
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.astep(action))

    async def astep(self, action: str):
        self._require_task()
        problem = self._problem
        assert problem is not None  # set by initial_messages during reset
        self.turn += 1
        last_turn = self.turn >= self.max_turns
        extraction = extract_code(action)
        if extraction.ok and problem.function_name and extraction.language != "python":
            extraction = Extraction(
                None, None, "wrong_language", f"{problem.id} takes a Python function"
            )
        if not extraction.ok:
            return self._finish_unjudged(extraction, last_turn)
        result = await self._judge(problem, extraction)
        passed = sum(1 for t in result.tests if t.verdict is Verdict.OK)
        total = len(problem.all_tests)
        solved = result.verdict is Verdict.OK and passed == total
        reward = (1.0 if solved else 0.0) if self.reward_mode == "all" else passed / total
        info = {
            "verdict": result.verdict.value,
            "passed": passed,
            "total": total,
            "language": extraction.language,
            "solved": solved,
            "turn": self.turn,
            "turn_reward": reward,
            "backend": result.backend,
            "test_verdicts": [t.verdict.value for t in result.tests],
            "message": _summary(result, len(problem.samples)),
        }
        if result.verdict is Verdict.CE:
            info["compile_output"] = _clip(result.compile_output)
        if solved or last_turn:
            return [], reward, True, False, info
        return [_feedback(problem, result)], reward, False, False, info

    def _finish_unjudged(self, extraction: Extraction, last_turn: bool):
        assert self._problem is not None
        info: dict[str, Any] = {
            "verdict": extraction.verdict,
            "passed": 0,
            "total": len(self._problem.all_tests),
            "language": None,
            "solved": False,
            "turn": self.turn,
            "turn_reward": 0.0,
            "test_verdicts": [],
            "message": extraction.message,
        }
        if last_turn:
            return [], 0.0, True, False, info
        text = f"Your answer could not be judged: {extraction.message}"
        return [{"role": "user", "content": text}], 0.0, False, False, info

    # -- sandbox --------------------------------------------------------------------------------
    async def _judge(self, problem: Problem, extraction: Extraction) -> RunResult:
        sandbox = await self._get_sandbox()
        # astep judges only an ok extraction, which always carries a program
        assert extraction.language is not None and extraction.source is not None
        program = Program(language=extraction.language, source=extraction.source)
        if problem.function_name:
            program = function_program(extraction.source, problem.function_name)
        tests = [TestCase(stdin=t.input, expected=t.output) for t in problem.all_tests]
        try:
            result = await sandbox.run(
                program,
                tests,
                problem_limits(problem, self._time_multiplier),
                judge_spec(problem),
                early_stop=self.reward_mode == "all",
            )
        except Exception as exc:  # any sandbox exception is infrastructure, never the model's fault
            raise InfraError(f"sandbox failed judging task {problem.id!r}: {exc!r}") from exc
        failed = [t for t in result.tests if t.verdict is Verdict.SE]
        if result.verdict is Verdict.SE or failed:
            detail = failed[0].message if failed else result.compile_output
            raise InfraError(
                f"sandbox system error on task {problem.id!r} "
                f"(backend {result.backend or sandbox.backend_name}): {detail}"
            )
        return result

    async def _get_sandbox(self) -> Sandbox:
        async with self._sandbox_lock:
            sandbox = self._sandbox
            if sandbox is None:
                try:
                    # create() may build an image or probe backends: keep it off the event loop.
                    sandbox = await asyncio.to_thread(
                        Sandbox.create, self._sandbox_backend, **self._sandbox_options
                    )
                except (ValueError, TypeError):
                    raise  # a configuration mistake, not an outage
                except Exception as exc:
                    raise InfraError(
                        f"could not start the sandbox (backend={self._sandbox_backend!r}): {exc}"
                    ) from exc
                self._sandbox = sandbox
            return sandbox

    async def aclose(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None and self._owns_sandbox:
            await sandbox.aclose()

    def close(self) -> None:
        if self._owns_sandbox and self._sandbox is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                task = loop.create_task(self.aclose())
                _closing.add(task)
                task.add_done_callback(_closing.discard)
            elif self._loop is not None and not self._loop.is_closed():
                self._loop.run_until_complete(self.aclose())
            else:
                asyncio.run(self.aclose())
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
        super().close()


# -- pure helpers ---------------------------------------------------------------------------------
def render_prompt(problem: Problem) -> str:
    parts = [problem.statement.strip()]
    for i, sample in enumerate(problem.samples, 1):
        if problem.function_name:  # the call and its value, as a person writes it
            parts.append(f"Example {i}:\n{_show_call(problem.function_name, sample)}")
            continue
        parts.append(
            f"Example {i}\nInput:\n{sample.input.rstrip()}\nOutput:\n{sample.output.rstrip()}"
        )
    if problem.function_name:
        if problem.starter_code.strip():
            parts.append(f"Starter code:\n```python\n{problem.starter_code.rstrip()}\n```")
        parts.append(FUNCTION_INSTRUCTION.format(name=problem.function_name))
        return "\n\n".join(parts)
    parts.append(f"Time limit: {problem.time_limit_s:g} s. Memory limit: {problem.memory_mb} MB.")
    parts.append(INSTRUCTION)
    return "\n\n".join(parts)


def problem_limits(problem: Problem, time_multiplier: float = 1.0) -> Limits:
    return Limits(time_s=problem.time_limit_s * time_multiplier, memory_mb=problem.memory_mb)


def judge_spec(problem: Problem) -> JudgeSpec:
    j = problem.judge
    options: dict[str, Any] = {
        "case_sensitive": j.case_sensitive,
        "space_change_sensitive": j.space_change_sensitive,
    }
    if j.mode == "checker":
        if j.checker_source is None:
            raise TaskError(f"task {problem.id!r}: judge mode 'checker' without a checker program")
        return JudgeSpec(
            mode="checker",
            checker=Program(language=j.checker_language, source=j.checker_source),
            checker_protocol=j.checker_protocol,  # type: ignore[arg-type]
            checker_args=j.checker_args,
            **options,
        )
    return JudgeSpec(mode=j.mode, abs_tol=j.abs_tol, rel_tol=j.rel_tol, **options)


def _show_call(function_name: str, sample: Any) -> str:
    return _clip(describe_function_test(TestCase(sample.input, sample.output), function_name))


def _clip(text: str, limit: int = FEEDBACK_CHARS) -> str:
    text = text.rstrip()
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n... ({len(text) - limit} more characters)"
    )


def _select_tiers(problems: list[Problem], tiers: list[str] | None) -> list[Problem]:
    if tiers is None:
        return problems
    known = sorted({p.tier for p in problems})
    unknown = sorted(set(tiers) - set(known))
    if unknown:
        raise ValueError(
            f"tiers={tiers!r}: no problem has tier {', '.join(map(repr, unknown))}; "
            f"this problem set has {', '.join(map(repr, known))}"
        )
    return [p for p in problems if p.tier in tiers]


def _first_failure(result: RunResult) -> int | None:
    return next((i for i, t in enumerate(result.tests) if t.verdict is not Verdict.OK), None)


def _summary(result: RunResult, n_samples: int) -> str:
    if result.verdict is Verdict.CE:
        return "compilation error"
    i = _first_failure(result)
    if i is None:
        return "all tests passed" if result.verdict is Verdict.OK else result.verdict.value
    where = f"sample test {i + 1}" if i < n_samples else f"hidden test {i - n_samples + 1}"
    return f"{result.tests[i].verdict.value} on {where}"


def _feedback(problem: Problem, result: RunResult) -> Message:
    again = "Fix the program and answer again with one ```python or ```cpp code block."
    if result.verdict is Verdict.CE:
        text = f"Compilation error:\n{_clip(result.compile_output)}\n\n{again}"
        return {"role": "user", "content": text}
    i = _first_failure(result)
    n_samples = len(problem.samples)
    if i is not None and i < n_samples and problem.function_name:
        got = result.tests[i]
        text = (
            f"Your program failed sample test {i + 1}: {got.verdict.value}.\n"
            f"{_show_call(problem.function_name, problem.samples[i])}\n"
            f"Error output:\n{_clip(got.stderr) or '(empty)'}"
        )
        return {"role": "user", "content": f"{text}\n\n{again}"}
    if i is not None and i < n_samples:
        test, got = problem.samples[i], result.tests[i]
        text = (
            f"Your program failed sample test {i + 1}: {got.verdict.value}.\n"
            f"Input:\n{_clip(test.input)}\nExpected output:\n{_clip(test.output)}\n"
            f"Your output:\n{_clip(got.stdout) or '(empty)'}"
        )
        if got.verdict is Verdict.RE and got.stderr.strip():
            text += f"\nError output:\n{_clip(got.stderr)}"
        return {"role": "user", "content": f"{text}\n\n{again}"}
    verdict = result.tests[i].verdict.value if i is not None else result.verdict.value
    text = f"Your program passes the samples but fails a hidden test ({verdict}).\n\n{again}"
    return {"role": "user", "content": text}


__all__ = ["CodeforcesEnv", "NO_CODE", "render_prompt", "problem_limits", "judge_spec"]
