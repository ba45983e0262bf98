"""Routed experts over real HTTP: `python -m gspo_agents.serve --enable-return-routed-experts` on
the tiny MoE model, the SGLang client asking as SGLang 0.5.23 is asked (return_routed_experts,
routed_experts_start_len; base64 int32 in meta_info.routed_experts), the rollout manager
collecting each trajectory's routes turn by turn, and the learner replaying them. A server
launched without the flag is refused when the client starts.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch
from test_engine_routes import reference_routes
from test_manager_support import CounterEnv

from gspo_agents.config import ModelConfig
from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.models import load_tokenizer, resolve_model
from gspo_agents.rollout.engine import EngineError, EngineRequestError
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.rollout.sglang_engine import SGLangEngine
from gspo_agents.rollout.sglang_wire import generate_body, parse_routed_experts
from gspo_agents.serve import launch
from gspo_agents.trajectory import Status, flatten

ARGS = ["--num-threads", "1", "--max-batch-size", "8"]


@pytest.fixture(scope="module")
def moe_path() -> str:
    return resolve_model(ModelConfig(name="tiny-moe"))


async def test_multi_turn_trajectories_carry_the_engines_routes_for_every_position(moe_path):
    with launch(model="tiny-moe", extra_args=[*ARGS, "--enable-return-routed-experts"]) as srv:
        engine = SGLangEngine([srv.url], return_routed_experts=True)
        try:
            config = RolloutConfig(num_samples_per_task=2, max_new_tokens_per_turn=8)
            manager = RolloutManager(engine, CounterEnv, load_tokenizer(moe_path), config)
            result = await manager.collect([{"id": "m", "turns": 3}])
        finally:
            await engine.close()
    trajs = result.trajectories
    assert len(trajs) == 2 and all(t.status == Status.COMPLETE for t in trajs)
    for traj in trajs:
        assert [s.kind for s in traj.segments] == ["model", "env"] * 2 + ["model"]
        # three requests, each asked from where the last stopped: together every position but
        # the last, each as the engine routed it (prompt, env tokens and model tokens)
        expected = reference_routes(moe_path, traj.token_ids)[:-1]
        assert traj.routes is not None
        torch.testing.assert_close(traj.routes, expected, rtol=0, atol=0)
    # the learner replays them: engine log-probs under the engine's routes give ratio 1
    batch = flatten(trajs, [1.0, -1.0], pad_id=0)
    cfg = LearnerConfig(
        algorithm="gspo",
        lr=1e-3,
        num_minibatches=1,
        routing_replay=True,
        routing_replay_source="engine",
    )
    learner = Learner(moe_path, cfg)
    metrics = learner.update(batch)
    learner.close()
    assert metrics["ratio_min"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["ratio_max"] == pytest.approx(1.0, abs=1e-4)


async def test_a_server_without_the_flag_is_refused_at_start():
    with launch(model="tiny-moe", extra_args=ARGS) as srv:
        engine = SGLangEngine([srv.url], return_routed_experts=True)
        try:
            with pytest.raises(EngineRequestError, match="--enable-return-routed-experts"):
                await engine.start()
        finally:
            await engine.close()


def test_wire_fields_and_decoding_are_sglangs():
    body = generate_body([1, 2, 3], _sampling(), "r", routes_start=2)
    # GenerateReqInput's field names in SGLang 0.5.23 (managers/io_struct.py)
    assert body["return_routed_experts"] is True and body["routed_experts_start_len"] == 2
    assert "return_routed_experts" not in generate_body([1], _sampling(), "r")
    # the detokenizer's encoding: base64 of the int32 (token, layer, top_k) tensor's bytes
    ids = np.arange(5 * 3 * 2, dtype=np.int32).reshape(5, 3, 2)
    raw = base64.b64encode(ids.tobytes()).decode("utf-8")
    got = parse_routed_experts(raw, positions=5)
    assert got is not None and got.dtype == torch.int32
    assert got.tolist() == ids.reshape(5, 6).tolist()
    with pytest.raises(EngineError, match="--enable-return-routed-experts"):
        parse_routed_experts(None, positions=5)
    with pytest.raises(EngineError, match="not a whole number"):
        parse_routed_experts(raw, positions=4)


def _sampling():
    from gspo_agents.rollout.engine import SamplingParams

    return SamplingParams(max_new_tokens=4)


def test_the_routes_request_validates_with_sglangs_own_request_class(tmp_path):
    """The body checked by SGLang 0.5.23's GenerateReqInput (tests/sglang_io_check.py), with a
    misspelt key as the control the checker must reject."""
    import json
    import os
    import subprocess
    import sys

    from test_sglang_conformance import CHECKER, PINNED, conformance_dir

    site = conformance_dir()
    ours = generate_body([5, 6, 7, 8], _sampling(), "r1", routes_start=3)
    typo = {**generate_body([5, 6], _sampling(), "r2"), "return_routed_expert": True}
    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps([{"path": "/generate", "body": b} for b in (ours, typo)]))
    proc = subprocess.run(
        [sys.executable, str(CHECKER), str(bodies), "1000"],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sglang"] == PINNED
    assert [e["body"] for e in result["errors"]] == [typo], result["errors"]
