"""F7.4: the Docker daemon restarted in the middle of a run.

The real dockerd is stopped with SIGTERM while sandboxed programs run in its containers, and
started again the way .ci/setup_sandbox.sh starts it. What must hold:
- an execution lost with the daemon is never a wrong verdict: it is SE (infrastructure), which the
  Codeforces env turns into InfraError (trajectory error), never a reward of 0;
- the warm pool recovers: once the daemon is back, executions succeed again with right verdicts;
- (wanted, not yet true) the lost execution is retried and gets its real verdict.
The `dockerd` fixture always leaves a running daemon behind, also when the test fails.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from hd_util import need

import envs
from envs.errors import InfraError
from sandbox import Limits, Program, Sandbox, SandboxUnavailable, TestCase, Verdict

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Outlives dockerd's shutdown grace (SIGTERM to containers, SIGKILL after 15 s): really lost.
SLEEPY = Program("python", "import time\ntime.sleep(25)\nprint(input())\n")
ECHO = Program("python", "print(input())\n")
CASE = [TestCase(stdin="7\n", expected="7")]
LIMITS = Limits(time_s=2.0, wall_time_s=60.0)
WRONG = "```python\nprint(0)\n```"


def _docker_sandbox() -> Sandbox:
    try:
        return Sandbox.create("docker", max_concurrency=2)
    except SandboxUnavailable as exc:
        need(False, f"docker sandbox unavailable: {exc}")
        raise


async def _restart_in_background(dockerd, after_s: float) -> None:
    """Restart the daemon in a thread after `after_s`, while the event loop keeps running."""
    await asyncio.sleep(after_s)
    done = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            dockerd.restart()
        except BaseException as exc:  # reported to the test below
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=work, daemon=True).start()
    while not done.is_set():
        await asyncio.sleep(0.2)
    if errors:
        raise errors[0]


async def _judge_later(sb: Sandbox, task: dict, action: str, delay_s: float):
    """A fresh env's reward for `action` after `delay_s`, or "InfraError"."""
    await asyncio.sleep(delay_s)
    env = envs.make("codeforces", sandbox=sb)
    env.reset(options={"task": task})
    try:
        return (await env.astep(action))[1]
    except InfraError:
        return "InfraError"


async def _until_ok(sb: Sandbox, attempts: int) -> list[Verdict]:
    seen = []
    for _ in range(attempts):
        result = await sb.run(ECHO, CASE, LIMITS)
        seen.append(result.verdict)
        if result.verdict is Verdict.OK:
            break
    return seen


async def test_restart_mid_run_loses_no_reward_and_the_pool_recovers(dockerd):
    sb = _docker_sandbox()
    env = envs.make("codeforces", sandbox=sb)
    try:
        task = next(t for t in env.load_tasks("train") if env.reference_response(t))
        env.reset(options={"task": task})
        assert (await env.astep(env.reference_response(task)))[1] == 1.0  # warm pool, right

        in_flight = asyncio.ensure_future(sb.run(SLEEPY, CASE, LIMITS))
        # A right answer submitted while the daemon is shutting down: 1.0 or InfraError, not 0.
        during = asyncio.ensure_future(_judge_later(sb, task, env.reference_response(task), 4.0))
        await _restart_in_background(dockerd, after_s=1.5)
        lost = await in_flight
        # Lost with the daemon: re-run once the daemon is back (OK), or, if it stays down past
        # the retries, an infrastructure verdict; never a wrong answer or a crash.
        assert lost.verdict in (Verdict.OK, Verdict.SE), lost
        outcome = await during
        assert outcome == "InfraError" or outcome == 1.0, outcome

        # The pool recovers: stale warm containers are dropped, fresh ones start.
        seen = await _until_ok(sb, attempts=4)
        assert seen[-1] is Verdict.OK, seen
        assert set(seen) <= {Verdict.SE, Verdict.OK}, seen

        # Rewards after the restart are right: the correct program 1.0, a wrong one 0.0 (WA),
        # and an infrastructure failure, if any, is InfraError, never a reward.
        for action, want in ((env.reference_response(task), 1.0), (WRONG, 0.0)):
            for _ in range(3):
                env.reset(options={"task": task})
                try:
                    _, reward, *_rest, info = await env.astep(action)
                except InfraError:
                    continue
                assert reward == want, info
                break
            else:
                pytest.fail(f"no verdict for {action[:30]!r} after the daemon came back")
    finally:
        await sb.aclose()


async def test_execution_lost_to_a_restart_is_retried(dockerd):
    sb = _docker_sandbox()
    try:
        warm = await asyncio.gather(*(sb.run(ECHO, CASE, LIMITS) for _ in range(2)))
        assert [r.verdict for r in warm] == [Verdict.OK] * 2  # two warm containers
        in_flight = asyncio.ensure_future(sb.run(SLEEPY, CASE, LIMITS))
        await _restart_in_background(dockerd, after_s=1.5)
        lost = await in_flight
        after = await sb.run(ECHO, CASE, LIMITS)  # gets the warm one that died idle
        assert (lost.verdict, after.verdict) == (Verdict.OK, Verdict.OK), (lost, after)
    finally:
        await sb.aclose()
