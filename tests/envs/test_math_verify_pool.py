"""The math-verify process pool: real equivalences, real timeouts, real crashes, bad gold, and
who is blamed for each (the answer: reward 0 + verify_error; the pool: InfraError)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time

import pytest

from envs.errors import InfraError, TaskError
from envs.math.env import MathEnv
from envs.math.verify import Verification, VerifierPool

# sympy evaluates this factorial eagerly: minutes of pure C/Python big-integer work that
# math-verify's signal-based timeouts could not interrupt; only killing the worker stops it.
HANG = "(10^{7})!"
SLOW = "\\binom{40000}{20000}"  # correct against itself; ~0.4 s of sympy, not cached


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(max_workers=2)
    yield p
    p.close()


@pytest.mark.parametrize(
    "gold, pred",
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{2}", "1/2"),
        ("0.5", "\\frac{1}{2}"),
        ("\\frac{1}{2}", "\\dfrac{1}{2}"),
        ("\\frac{1}{2}", "\\frac12"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("(2, -3)", "(2,-3)"),
        ("x^2+1", "1+x^2"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
        ("204", "204"),
    ],
)
def test_equivalent_forms_verify(pool, gold, pred):
    assert pool.verify(gold, pred) == Verification(correct=True, gold_ok=True, pred_ok=True)


@pytest.mark.parametrize(
    "gold, pred", [("\\frac{1}{2}", "0.51"), ("204", "205"), ("(2, -3)", "(-3, 2)")]
)
def test_different_values_do_not_verify(pool, gold, pred):
    v = pool.verify(gold, pred)
    assert not v.correct and v.gold_ok and v.pred_ok


def test_unreadable_prediction_is_not_correct(pool):
    v = pool.verify("3", "???")
    assert (v.correct, v.gold_ok, v.pred_ok) == (False, True, False)


def test_unreadable_gold_is_flagged(pool):
    assert not pool.verify("}{", "1").gold_ok


async def test_a_timeout_is_the_answers_fault_and_the_pool_recovers(pool):
    v = await pool.averify("1", HANG, timeout_s=1.0)
    assert (v.correct, v.pred_ok) == (False, False) and "longer than 1 s" in v.error
    assert (await pool.averify("\\frac{1}{2}", "0.5")).correct  # fresh workers


def test_sync_timeout_is_the_answers_fault_and_the_pool_recovers(pool):
    v = pool.verify("1", HANG, timeout_s=1.0)
    assert not v.correct and "longer than" in v.error
    assert pool.verify("3", "3").correct


# Answers a policy could use to break the grader: each must cost it the reward, not drop the
# trajectory (InfraError) or fail the step.
HOSTILE_ANSWERS = {
    "tower_of_powers": "2^{2^{30}}",
    "deep_braces": "{" * 300 + "1" + "}" * 300,
    "deep_parens": "(" * 500 + "1" + ")" * 500,
    "deep_fractions": "\\frac{" * 100 + "1" + "}{2}" * 100,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ANSWERS))
async def test_answers_that_break_the_verifier_score_zero_with_verify_error(pool, name):
    env = MathEnv(pool=pool, verify_timeout_s=1.0)
    env.reset(options={"task": {"id": "t", "question": "q", "answer": "1"}})
    _, reward, terminated, _, info = await env.astep(f"\\boxed{{{HOSTILE_ANSWERS[name]}}}")
    assert reward == 0.0 and terminated
    assert info["verify_error"] and info["reason"] == "verify_error" and not info["correct"]
    assert (await pool.averify("2", "2")).correct  # and the pool serves the next answer


async def test_a_worker_killed_once_is_retried_not_an_error(pool):
    pool.verify("1", "1")  # started
    task = asyncio.create_task(pool.averify(SLOW, SLOW, timeout_s=60))
    await asyncio.sleep(0.3)
    for pid in pool.worker_pids():
        os.kill(pid, signal.SIGKILL)
    v = await task
    assert v.correct and not v.error
    assert pool.verify("2", "2").correct


async def test_a_dead_pool_is_an_infra_error(pool):
    """Workers that die on every task, the known-good canary included: the pool's fault."""
    pool.verify("1", "1")
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set():
            for pid in pool.worker_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        with pytest.raises(InfraError, match="died|restarts|start"):
            await pool.averify(SLOW, SLOW, timeout_s=60)
    finally:
        stop.set()
        thread.join()
    assert pool.verify("2", "2").correct


async def test_the_deadline_excludes_time_waiting_for_a_worker(pool):
    """64 concurrent slow-but-correct answers on 2 workers: the queue holds each for far longer
    than the deadline, but each verification alone is well within it, so all score 1. The
    deadline is 10x one verification measured here (distinct answers: no cache; both workers
    warmed first), so the test means the same on a fast or a loaded machine; the queue is ~32
    verifications long."""
    warm = [f"\\binom{{{40_100 + i}}}{{20000}}" for i in range(2)]
    assert all(r.correct for r in await asyncio.gather(*(pool.averify(a, a) for a in warm)))
    probe = "\\binom{40200}{20000}"
    t0 = time.perf_counter()
    assert (await pool.averify(probe, probe, timeout_s=60)).correct
    deadline = 10 * (time.perf_counter() - t0)
    started = time.perf_counter()
    slow = [f"\\binom{{{40_000 + i}}}{{20000}}" for i in range(64)]
    results = await asyncio.gather(*(pool.averify(a, a, timeout_s=deadline) for a in slow))
    elapsed = time.perf_counter() - started
    assert [r.error for r in results if r.error] == []
    assert all(r.correct for r in results)
    assert elapsed > deadline  # the queue was longer than the deadline: it was not counted


async def test_verification_does_not_block_the_event_loop(pool):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.create_task(ticker())
    try:
        assert (await pool.averify("1", HANG, timeout_s=1.0)).error
    finally:
        t.cancel()
    assert ticks >= 10  # the loop kept running for the whole second


async def test_concurrent_verifications(pool):
    results = await asyncio.gather(*(pool.averify(str(i), f"{2 * i}/2") for i in range(40)))
    assert all(r.correct for r in results)


async def test_math_env_bad_gold_raises_task_error(pool):
    env = MathEnv(pool=pool)
    env.reset(options={"task": {"id": "bad", "question": "q", "answer": "}{"}})
    with pytest.raises(TaskError, match="bad"):
        await env.astep("\\boxed{1}")


def test_workers_do_not_reimport_the_parents_main_module(tmp_path):
    """The trainer's __main__ imports torch; spawned verifier workers must not pay for it."""
    import subprocess
    import sys

    (tmp_path / "heavy_main.py").write_text(
        "print('MAIN IMPORTED', flush=True)\n"
        "from envs.math.verify import VerifierPool\n"
        "if __name__ == '__main__':\n"
        "    p = VerifierPool(2)\n"
        "    print(p.verify('1/2', '0.5').correct, flush=True)\n"
        "    p.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "heavy_main"], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["MAIN", "IMPORTED", "True"]
