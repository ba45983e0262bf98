"""The math-verify process pool: real equivalences, real timeouts, real crashes, bad gold."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from envs.errors import InfraError, TaskError
from envs.math.env import MathEnv
from envs.math.verify import Verification, VerifierPool

# sympy evaluates this factorial eagerly: minutes of pure C/Python big-integer work that
# math-verify's signal-based timeouts could not interrupt; only killing the worker stops it.
HANG = "(10^{7})!"


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


async def test_timeout_is_an_infra_error_and_the_pool_recovers(pool):
    with pytest.raises(InfraError, match="longer than"):
        await pool.averify("1", HANG, timeout_s=1.0)
    assert (await pool.averify("\\frac{1}{2}", "0.5")).correct  # fresh workers


def test_sync_timeout_is_an_infra_error_and_the_pool_recovers(pool):
    with pytest.raises(InfraError, match="longer than"):
        pool.verify("1", HANG, timeout_s=1.0)
    assert pool.verify("3", "3").correct


async def test_a_killed_worker_is_an_infra_error(pool):
    pool.verify("1", "1")  # started
    task = asyncio.create_task(pool.averify("1", HANG, timeout_s=120))
    await asyncio.sleep(0.5)
    for pid in pool.worker_pids():
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(InfraError, match="died"):
        await task
    assert pool.verify("2", "2").correct


async def test_verification_does_not_block_the_event_loop(pool):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.create_task(ticker())
    try:
        with pytest.raises(InfraError):
            await pool.averify("1", HANG, timeout_s=1.0)
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


async def test_math_env_timeout_propagates_as_infra_error(pool):
    env = MathEnv(pool=pool, verify_timeout_s=1.0)
    env.reset(options={"task": {"id": "t", "question": "q", "answer": "1"}})
    with pytest.raises(InfraError):
        await env.astep(f"\\boxed{{{HANG}}}")


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
