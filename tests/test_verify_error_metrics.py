"""An answer that breaks the math verifier is scored (reward 0), kept, and counted in the metrics.

Real parts end to end: the RolloutManager over the in-process LocalEngine with the tiny model, the
real MathEnv and its math-verify process pool. The tiny model cannot write a hostile answer, so the
env below puts one in its place (what a policy that learned to break the grader would write).
"""

from __future__ import annotations

import asyncio

import pytest
from test_manager_support import tiny_model_dir, tiny_tokenizer

from envs.math.env import MathEnv
from envs.math.verify import VerifierPool
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.trajectory import Status

HOSTILE = "\\boxed{" + "(" * 500 + "1" + ")" * 500 + "}"  # math-verify chews on it for minutes


class HostileMathEnv(MathEnv):
    async def astep(self, action: str):
        return await super().astep(HOSTILE)


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(max_workers=1)
    yield p
    p.close()


async def test_verify_errors_are_scored_zero_and_counted(pool) -> None:
    engine = LocalEngine(tiny_model_dir(), max_batch_size=4, seed=0)
    try:
        manager = RolloutManager(
            engine,
            lambda: HostileMathEnv(pool=pool, verify_timeout_s=1.0),
            tiny_tokenizer(),
            RolloutConfig(num_samples_per_task=2, max_new_tokens_per_turn=4),
        )
        task = {"id": "t", "question": "1?", "answer": "1"}
        result = await manager.collect([task])
    finally:
        await engine.close()
    trajectories = result.trajectories
    assert [t.status for t in trajectories] == [Status.COMPLETE] * 2  # scored, not dropped
    assert all(t.reward == 0.0 and "longer than" in t.info["verify_error"] for t in trajectories)
    assert result.metrics["rollout/verify_errors"] == 2.0
    assert result.metrics["rollout/error_env_infra"] == 0.0
    assert (await pool.averify("3", "3")).correct  # the pool recovered


def test_clean_answers_count_no_verify_errors(pool) -> None:
    env = MathEnv(pool=pool)
    env.reset(options={"task": {"id": "t", "question": "q", "answer": "1/2"}})
    *_, info = asyncio.run(env.astep("\\boxed{0.5}"))
    assert info["correct"] and "verify_error" not in info
