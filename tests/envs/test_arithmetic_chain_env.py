"""ArithmeticChain-v0 (per-turn rewards) and its turn rewards reaching GSPO-token's batch through
the real rollout manager and the in-process engine."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import envs
from gspo_agents.advantages import turn_advantages
from gspo_agents.batching import prepare_batch, segment_turn_rewards
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.trajectory import Status

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_manager_support import tiny_model_dir, tiny_tokenizer  # noqa: E402


def test_each_turn_asks_one_question_and_rewards_a_third():
    env = envs.make("arithmetic_chain")
    task = env.load_tasks("train")[0]
    assert len(task["exprs"]) == 3 and env.max_turns == 3
    messages, _ = env.reset(options={"task": task})
    assert messages == [{"role": "user", "content": f"Compute {task['exprs'][0]}."}]
    a0, a1, a2 = task["answers"]
    obs, reward, done, _, info = env.step(f"\\boxed{{{a0}}}")
    assert (reward, done, info["turn_reward"]) == (0.0, False, pytest.approx(1 / 3))
    assert obs == [{"role": "user", "content": f"Compute {task['exprs'][1]}."}]
    _, _, done, _, info = env.step(f"\\boxed{{{a1 + 1}}}")  # wrong
    assert (done, info["turn_reward"], info["correct"]) == (False, 0.0, False)
    obs, reward, done, _, info = env.step(f"the answer is \\boxed{{{a2}}}")
    assert (obs, done, reward) == ([], True, pytest.approx(2 / 3))  # the share answered


def test_tasks_are_reproducible_and_the_splits_disjoint():
    a, b = envs.make("arithmetic_chain"), envs.make("arithmetic_chain")
    assert a.load_tasks("train") == b.load_tasks("train")
    train = {e for t in a.load_tasks("train") for e in t["exprs"]}
    test = {e for t in a.load_tasks("test") for e in t["exprs"]}
    assert train and test and not train & test
    with pytest.raises(ValueError, match="num_questions"):
        envs.make("arithmetic_chain", num_questions=0)


def test_rollout_turn_rewards_reach_the_per_turn_batch():
    engine = LocalEngine(tiny_model_dir(), max_batch_size=16, seed=0)
    cfg = RolloutConfig(num_samples_per_task=3, max_new_tokens_per_turn=6, max_context_tokens=256)
    manager = RolloutManager(engine, lambda: envs.make("arithmetic_chain"), tiny_tokenizer(), cfg)
    tasks = envs.make("arithmetic_chain").load_tasks("train")[:2]

    async def go():
        try:
            return await manager.collect(tasks)
        finally:
            await manager.aclose()
            await engine.close()

    result = asyncio.run(go())
    trajectories = result.trajectories
    assert len(trajectories) == 6
    for t in trajectories:
        assert t.status == Status.COMPLETE and t.num_turns == 3
        assert segment_turn_rewards(t) == t.turn_rewards  # one per model turn, as recorded
        assert sum(t.turn_rewards) == pytest.approx(t.reward)
    prep = prepare_batch(result.groups, pad_id=0, per_turn=True, filter_zero_spread=False)
    kept = prep.trajectories
    want = turn_advantages([t.turn_rewards for t in kept], [t.group_id for t in kept])
    for row, t in enumerate(kept):
        pos, got = len(t.prompt_ids), []
        for seg in t.segments:
            if seg.kind == "model":
                got.append(float(prep.batch.advantages_BT[row, pos]))
            pos += len(seg.token_ids)
        assert got == pytest.approx(want.advantages[row], abs=1e-6)
