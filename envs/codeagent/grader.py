"""CodeAgent-v0's grader: the hidden checks, run where nothing the agent did can reach them.

After the episode every process the agent left in its session is killed, then the graded module's
source (and nothing else) is read from the workspace through the session agent, and the hidden
checks run in a FRESH one-shot sandbox run (`Sandbox.run` with the function harness of
sandbox/judging/fnharness.py), never in the agent's workspace. So:

- the grader writes nothing into the workspace: a chmod-ed, full (blocks or inodes) or otherwise
  wrecked workspace cannot make grading raise; an unreadable, missing, oversized or non-regular
  module file is the agent's doing and scores 0 with the reason in `Grade.reason`;
- nothing the agent planted besides the module text reaches the run (sitecustomize, .pth files,
  conftest.py, modules named like the standard library, __pycache__, edited test files, exported
  variables, background processes): the run starts from a clean scratch directory with
  `python3 -I`, and the module is compiled from its source text;
- the result channel is the harness's trusted parent: the module runs in a child process that
  holds only a private pipe to it; the parent, which alone knows each check's random nonce and
  expected value, prints `<nonce> OK|WA`. A module that prints result lines, exits early or
  monkeypatches anything still fails every check it does not pass by returning the right value.

Checks are type-strict (an int where a float is expected, or True for 1, is wrong). What this does
not protect against: a sandbox backend that breaks (BackendFailure, Verdict.SE) is
infrastructure and raises; the caller turns it into InfraError, never a 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Grade", "grade", "hidden_check"]

MODULE_MAX_BYTES = 256 << 10  # a CodeAgent module is a few hundred bytes; more is not a fix


@dataclass(frozen=True, slots=True)
class Grade:
    """passed: per hidden case (a case not run after an early stop counts as not passed);
    reason: why the episode did not resolve, in words ("" when every case passed)."""

    passed: tuple[bool, ...]
    reason: str = ""
    verdicts: tuple[str, ...] = field(default_factory=tuple)

    @property
    def resolved(self) -> bool:
        return bool(self.passed) and all(self.passed)

    @property
    def fraction(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


def hidden_check(case: dict[str, Any]) -> str:
    """Harness check code for one hidden case: the call's value must have the expected type and
    equal the expected value (floats within 1e-9 relative). It runs in the trusted parent."""
    return (
        f"_expect = {case['expect']!r}\n"
        f"_got = {case['call']}\n"
        "assert type(_got) is type(_expect), "
        "f'returned a {type(_got).__name__}, expected a {type(_expect).__name__}'\n"
        "if type(_expect) is float:\n"
        "    assert __import__('math').isclose(_got, _expect, rel_tol=1e-9, abs_tol=1e-12)\n"
        "else:\n"
        "    assert _got == _expect, 'wrong value'\n"
    )


async def grade(ws: Any, sandbox: Any, task: dict[str, Any], *, early_stop: bool) -> Grade:
    """Grade the episode of `task` whose workspace is `ws` (a live session) with `sandbox`.

    Raises sandbox.SandboxError (or a subclass) only for the sandbox's own failures."""
    cases = task["hidden"]
    none = tuple(False for _ in cases)
    await ws.kill_processes()  # nothing the agent started may run on while we read
    path = f"/workspace/repo/{task['reference']['path']}"
    try:
        data = await ws.read_file(path, max_bytes=MODULE_MAX_BYTES)
    except (OSError, ValueError) as exc:  # missing, chmod-ed, a FIFO, a directory, too big
        return Grade(none, f"the graded module {path} could not be read: {exc}")
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        return Grade(none, f"the graded module {path} is not UTF-8 text")
    return await _run_checks(sandbox, task, source, early_stop=early_stop)


async def _run_checks(
    sandbox: Any, task: dict[str, Any], source: str, *, early_stop: bool
) -> Grade:
    from sandbox import Limits, SandboxError, Verdict
    from sandbox.judging.functional import function_call

    cases = task["hidden"]
    program, tests = function_call(
        source, task["function"], [{"check": hidden_check(c)} for c in cases]
    )
    result = await sandbox.run(
        program, tests, Limits(time_s=2.0, memory_mb=256), early_stop=early_stop
    )
    verdicts = [t.verdict for t in result.tests]
    if result.verdict is Verdict.SE or Verdict.SE in verdicts:
        detail = next((t.message for t in result.tests if t.verdict is Verdict.SE), "")
        raise SandboxError(f"the grading sandbox failed: {detail or result.compile_output}")
    passed = tuple(i < len(verdicts) and verdicts[i] is Verdict.OK for i in range(len(cases)))
    names = tuple(v.value for v in verdicts)
    if all(passed):
        return Grade(passed, "", names)
    if result.verdict is Verdict.CE:
        return Grade(passed, f"the graded module does not compile: {result.compile_output[:300]}")
    failed = next(i for i, ok in enumerate(passed) if not ok)
    why = result.tests[failed].verdict.value if failed < len(result.tests) else "not run"
    return Grade(passed, f"hidden case {failed + 1}/{len(cases)} failed ({why})", names)
