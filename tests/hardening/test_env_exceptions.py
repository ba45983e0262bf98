"""F7.3: environment exceptions inside step -> the trajectory is marked error and counted;
training continues.

A real env (Arithmetic-v0 with a broken step, flaky_env.py) raises RuntimeError and InfraError
on a deterministic share of its steps. Through the real RolloutManager + LocalEngine + tiny model,
prepare_batch and a real Learner update; and through the train CLI, where the env is registered
with `gymnasium.register` before `gspo_agents.train.main` runs (the README's way for own envs).
Malformed step return values (NaN or None reward, a short tuple) are covered too.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from pathlib import Path

import flaky_env
import pytest
from hd_util import FAST, metric_rows

import envs
from gspo_agents.batching import prepare_batch
from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.trajectory import Status

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def model_dir() -> str:
    return resolve_model(ModelConfig(name="tiny"))


@pytest.fixture(scope="module")
def engine(model_dir):
    eng = LocalEngine(model_dir, max_batch_size=16, seed=0)
    yield eng
    asyncio.run(eng.close())


def _manager(engine, model_dir: str, fault: str) -> RolloutManager:
    flaky_env.register()
    factory = lambda: envs.make(flaky_env.ENV_ID, fault=fault, every=3, difficulty=1)  # noqa: E731
    cfg = RolloutConfig(num_samples_per_task=4, max_new_tokens_per_turn=12)
    return RolloutManager(engine, factory, load_tokenizer(model_dir), cfg)


def _tasks(n: int) -> list[dict]:
    return envs.make("arithmetic", difficulty=1).load_tasks("train")[:n]


async def test_env_exceptions_are_counted_errors_and_the_step_trains(engine, model_dir):
    result = await _manager(engine, model_dir, "raise").collect(_tasks(4))
    trajs = result.trajectories
    errors = [t for t in trajs if t.status == Status.ERROR]
    kinds = {t.info["error_kind"] for t in errors}
    assert kinds == {"env_exception", "env_infra"}, kinds
    for t in errors:
        assert t.reward is None and not t.trainable  # never scored 0
        assert "flaky" in t.error
    m = result.metrics
    assert m["rollout/error_env_exception"] + m["rollout/error_env_infra"] == len(errors)
    assert m["rollout/error"] == len(errors) < len(trajs)

    learner = Learner(model_dir, LearnerConfig(num_minibatches=1))
    prepared = prepare_batch(result.groups, pad_id=learner.pad_token_id, filter_zero_spread=False)
    assert prepared.metrics["num_error"] == len(errors)
    assert prepared.metrics["num_trained_seqs"] == len(trajs) - len(errors)
    metrics = learner.update(prepared.batch)
    assert math.isfinite(metrics["loss"]) and metrics["skipped_steps"] == 0
    learner.close()


@pytest.mark.parametrize("fault", ["nan_reward", "none_reward", "bad_tuple"])
async def test_malformed_step_return_is_an_error_not_a_crash(engine, model_dir, fault):
    result = await _manager(engine, model_dir, fault).collect(_tasks(2))
    trajs = result.trajectories
    assert len(trajs) == 8
    bad = [t for t in trajs if t.status == Status.ERROR]
    assert bad and all(t.info["error_kind"] == "env_exception" for t in bad)
    assert all(math.isfinite(t.reward) for t in trajs if t.trainable)


@pytest.mark.slow
def test_train_cli_keeps_training_through_env_exceptions(tmp_path):
    run_dir = tmp_path / "run"
    boot = "import flaky_env; flaky_env.register(); from gspo_agents.train import main; main()"
    overrides = [o for o in FAST if not o.startswith("+env.kwargs")]
    cmd = [
        sys.executable,
        "-c",
        boot,
        f"env.name={flaky_env.ENV_ID}",
        "+env.kwargs.difficulty=1",
        "+env.kwargs.every=3",
        f"trainer.run_dir={run_dir}",
        "trainer.steps=2",
        *overrides,
    ]
    env = {**__import__("os").environ, "PYTHONPATH": str(HERE)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metric_rows(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["rollout/error_env_exception"] for r in rows) > 0
    assert sum(r["rollout/error_env_infra"] for r in rows) > 0
    for r in rows:
        assert r["num_trained_seqs"] == r["num_trajectories"] - r["num_error"] > 0
        assert math.isfinite(r["loss"])
