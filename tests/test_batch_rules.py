"""The rules between rollouts and the learner's batch, each on constructed groups with the expected
advantages written out by hand: normalize_std on both advantage paths and through train_step, DAPO's
overlong filtering (out of the loss AND the baseline), which trajectories count as overlong, where
the per-turn penalty lands, and dynamic sampling's refill (the discount in its signal check, fresh
tasks per round, truncation to the step's size).
"""

from __future__ import annotations

import asyncio
import math

import pytest
from omegaconf import OmegaConf
from test_advantages import multi_turn, turn_values

from gspo_agents import refill, train
from gspo_agents.batching import (
    has_signal,
    is_overlong,
    prepare_batch,
    refill_task_indices,
    task_indices_for_step,
)
from gspo_agents.rollout.records import RolloutResult
from gspo_agents.trajectory import Status

EPS = 1e-6  # group_advantages' default


def _seq_values(batch) -> list[float]:
    return [v[0] for v in (turn_values(batch, r) for r in range(batch.num_sequences))]


def _cut(traj, how: str):
    if how == "length":
        traj.info["last_finish"] = "length"
    else:  # the context filled between turns: the last turn itself stopped normally
        traj.info.update(last_finish="stop", truncated_by="context")
        traj.status = Status.TRUNCATED
    return traj


# --------------------------------------------------------------------------------------------
# normalize_std
# --------------------------------------------------------------------------------------------
def test_normalize_std_false_reaches_both_advantage_paths_of_the_batch():
    groups = [[multi_turn("a", [3.0]), multi_turn("a", [1.0]), multi_turn("a", [2.0])]]
    plain = prepare_batch(groups, pad_id=0, normalize_std=False)
    assert _seq_values(plain.batch) == pytest.approx([1.0, -1.0, 0.0])  # r - mean, mean 2
    scaled = prepare_batch(groups, pad_id=0)
    std = math.sqrt(2 / 3)
    assert _seq_values(scaled.batch) == pytest.approx([1 / (std + EPS), -1 / (std + EPS), 0.0])
    turns = [[multi_turn("a", [0.0, 4.0]), multi_turn("a", [0.0, 0.0])]]
    per_turn = prepare_batch(turns, pad_id=0, per_turn=True, normalize_std=False)
    # returns [4, 4] and [0, 0]: pooled mean 2 (std 2, so dividing would give +-1)
    assert turn_values(per_turn.batch, 0) == pytest.approx([2.0, 2.0])
    assert turn_values(per_turn.batch, 1) == pytest.approx([-2.0, -2.0])


class _AtVersion:
    """Stands in for the rollout manager: train_step reads only its weight version here."""

    def __init__(self, version: int = 0) -> None:
        self.weight_version = version


class _Stop(Exception):
    pass


class _Recorder:
    """Stands in for the learner only to capture the batch train_step hands to `update`."""

    pad_token_id = 0
    batch = None

    def update(self, batch):
        self.batch = batch
        raise _Stop


def test_train_step_passes_every_batch_option_to_the_batch_code():
    groups = [
        [
            _cut(multi_turn("a", [9.0]), "length"),
            multi_turn("a", [5.0]),
            multi_turn("a", [1.0]),
        ]
    ]
    cfg = OmegaConf.create(
        {
            "algorithm": {
                "name": "gspo",
                "filter_zero_spread_groups": True,
                "turn_discount": 1.0,
                "normalize_std": False,
                "overlong_filter": True,
                "overlong_penalty": 0.0,
                "overlong_buffer": 0,
            },
            "rollout": {"max_new_tokens_per_turn": 16, "max_version_lag": None},
        }
    )
    learner = _Recorder()
    with pytest.raises(_Stop):
        asyncio.run(
            train.train_step(cfg, learner, _AtVersion(), RolloutResult(groups, {}), None, 0)
        )
    # the cut one is gone from loss and baseline; the others get r - mean(5, 1), not / std 2
    assert _seq_values(learner.batch) == pytest.approx([2.0, -2.0])


def test_train_step_passes_the_overlong_buffer_and_the_current_weight_version():
    partial = multi_turn("a", [0.0, 1.0])  # 2 turns of 2 tokens: free of the buffer (8, 2)
    partial.segments[0].versions = [1, 2]  # lags 2 and 1 behind version 3
    partial.segments[2].versions = [3, 3]
    short = multi_turn("a", [1.0], tokens_per_turn=3)  # 3 of 4 tokens: -0.5 in the buffer of 2
    other = multi_turn("a", [0.0])
    for fresh in (short, other):
        fresh.segments[0].versions = [3] * len(fresh.segments[0].token_ids)
    cfg = OmegaConf.create(
        {
            "algorithm": {
                "name": "gspo",
                "filter_zero_spread_groups": True,
                "turn_discount": 1.0,
                "normalize_std": False,
                "overlong_filter": False,
                "overlong_penalty": 0.0,
                "overlong_buffer": 2,
            },
            "rollout": {"max_new_tokens_per_turn": 4, "max_version_lag": 1},
        }
    )
    learner = _Recorder()
    result = RolloutResult([[partial, short, other]], {})
    with pytest.raises(_Stop):
        asyncio.run(train.train_step(cfg, learner, _AtVersion(3), result, None, 0))
    # rewards 1, 1 - 0.5, 0: r - mean 0.5 (without the buffer: 1, 1, 0 -> 1/3, 1/3, -2/3)
    assert _seq_values(learner.batch) == pytest.approx([0.5, 0.0, -0.5])
    # only the token of version 1 lags more than 1 behind version 3 (against 4: version 2 too)
    assert learner.batch.loss_mask_BT[0].tolist() == [0, 0, 0, 1, 0, 1, 1]


# --------------------------------------------------------------------------------------------
# overlong: which trajectories, the filter's baseline, the penalty's turn
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["length", "context"])
def test_a_trajectory_cut_by_either_budget_is_overlong_and_penalised(how):
    cut = _cut(multi_turn("a", [1.0]), how)
    assert is_overlong(cut)
    assert not is_overlong(multi_turn("a", [1.0]))
    groups = [[cut, multi_turn("a", [1.0])]]
    prep = prepare_batch(groups, pad_id=0, overlong_penalty=0.5)
    # rewards 0.5 and 1: mean 0.75, std 0.25
    assert _seq_values(prep.batch) == pytest.approx([-0.25 / (0.25 + EPS), 0.25 / (0.25 + EPS)])
    assert prep.metrics["overlong_frac"] == 0.5


@pytest.mark.parametrize("how", ["length", "context"])
def test_overlong_filter_leaves_the_cut_trajectory_out_of_the_group_baseline(how):
    cut = _cut(multi_turn("a", [0.0]), how)
    ok, also_ok, wrong = multi_turn("a", [1.0]), multi_turn("a", [1.0]), multi_turn("a", [0.0])
    prep = prepare_batch([[cut, ok, also_ok, wrong]], pad_id=0, overlong_filter=True)
    assert prep.trajectories == [ok, also_ok, wrong]
    # baseline over the three kept: mean 2/3, std sqrt(2)/3 (with the cut one: mean 1/2, std 1/2)
    std = math.sqrt(2) / 3
    hi, lo = (1 / 3) / (std + EPS), (-2 / 3) / (std + EPS)
    assert _seq_values(prep.batch) == pytest.approx([hi, hi, lo])
    assert prep.metrics["overlong_frac"] == 0.25
    # a group whose only spread came from the cut trajectory carries no signal
    alone = [[_cut(multi_turn("b", [0.0]), how), multi_turn("b", [1.0])]]
    assert prepare_batch(alone, pad_id=0, overlong_filter=True).batch is None
    assert not has_signal(alone[0], overlong_filter=True)
    assert has_signal(alone[0])


def test_per_turn_overlong_penalty_lands_on_the_last_turn():
    cut = _cut(multi_turn("a", [0.0, 1.0]), "length")
    other = multi_turn("a", [1.0, 0.0])
    prep = prepare_batch([[cut, other]], pad_id=0, per_turn=True, overlong_penalty=0.5)
    # cut's turn rewards become [0, 0.5]: returns [0.5, 0.5]; other's returns [1, 0]
    pooled = [0.5, 0.5, 1.0, 0.0]
    mean = sum(pooled) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in pooled) / 4)
    want = [(x - mean) / (std + EPS) for x in pooled]
    assert turn_values(prep.batch, 0) == pytest.approx(want[:2], abs=1e-6)
    assert turn_values(prep.batch, 1) == pytest.approx(want[2:], abs=1e-6)


# --------------------------------------------------------------------------------------------
# dynamic sampling's refill
# --------------------------------------------------------------------------------------------
def test_refill_draws_only_tasks_the_step_has_not_used():
    used = set(task_indices_for_step(20, 3, 4, seed=1))
    first = refill_task_indices(20, 3, 1, 4, 1, used)
    assert len(first) == 4 and not set(first) & used
    second = refill_task_indices(20, 3, 2, 4, 1, used | set(first))
    assert len(second) == 4 and not set(second) & (used | set(first))
    assert refill_task_indices(20, 3, 1, 4, 1, used) == first  # deterministic (resume)
    assert sorted(refill_task_indices(5, 0, 1, 4, 1, {0, 1, 2})) == [3, 4]
    assert refill_task_indices(3, 0, 1, 4, 1, {0, 1, 2}) == []


class _ScriptedCollector:
    """Stands in for RolloutManager.collect (the only method refill uses), returning groups whose
    turn rewards the test chose: task["samples"] lists each sample's turn rewards."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def collect(self, tasks):
        self.calls.append([t["id"] for t in tasks])
        groups = [
            [
                multi_turn(t["id"], r, tokens_per_turn=n)
                for r, n in zip(t["samples"], t.get("tokens", [2] * len(t["samples"])))
            ]
            for t in tasks
        ]
        return RolloutResult(groups, {})


def _refill(tasks, *, name="gspo", discount=1.0, tasks_per_step=2, rounds=3, buffer=0):
    cfg = OmegaConf.create(
        {
            "trainer": {"tasks_per_step": tasks_per_step, "seed": 0},
            "algorithm": {
                "name": name,
                "turn_discount": discount,
                "dynamic_sampling_rounds": rounds,
                "overlong_penalty": 0.0,
                "overlong_filter": False,
                "overlong_buffer": buffer,
            },
            "rollout": {"max_new_tokens_per_turn": 4 if buffer else 16},
        }
    )
    manager = _ScriptedCollector()
    first = asyncio.run(
        manager.collect([tasks[i] for i in task_indices_for_step(len(tasks), 0, tasks_per_step, 0)])
    )
    metrics: dict = {}
    kept = asyncio.run(refill.refill_groups(cfg, manager, tasks, 0, first.groups, metrics))
    return kept, manager.calls, metrics


FLAT = [[1.0], [1.0]]  # no spread
SIGNAL = [[1.0], [0.0]]
# per turn: returns [1, 1] and [1] at gamma 1 (no spread), [0.5, 1] and [1] at gamma 0.5
DISCOUNT_ONLY = [[0.0, 1.0], [1.0]]


def test_refill_signal_check_uses_the_turn_discount():
    tasks = [{"id": f"t{i}", "samples": DISCOUNT_ONLY} for i in range(6)]
    kept, _, metrics = _refill(tasks, name="gspo_token", discount=0.5)
    assert metrics["zero_spread_frac_before_refill"] == 0.0 and len(kept) == 2
    kept, calls, metrics = _refill(tasks, name="gspo_token", discount=1.0)
    assert metrics["zero_spread_frac_before_refill"] == 1.0
    assert metrics["refill_rounds"] == 2  # 6 tasks: the third round has nothing unused to draw


def test_refill_never_redraws_a_task_and_truncates_to_the_step_size():
    tasks = [{"id": f"f{i}", "samples": FLAT} for i in range(4)]
    tasks += [{"id": f"s{i}", "samples": SIGNAL} for i in range(6)]
    kept, calls, metrics = _refill(tasks, tasks_per_step=3, rounds=5)
    drawn = [tid for call in calls for tid in call]
    assert len(drawn) == len(set(drawn))  # no task drawn twice within the step
    assert all(len(c) == 3 for c in calls)  # each round draws a whole step's worth
    assert len(kept) == 3 and all(has_signal(g) for g in kept)
    # the kept groups are the first three with signal, in draw order
    with_signal = [tid for tid in drawn if tid.startswith("s")]
    assert [g[0].group_id for g in kept] == with_signal[:3]
    assert len(with_signal) > 3  # this seed's draws overshoot: truncation was exercised
    # nothing with signal anywhere: every round draws tasks no earlier round drew
    flat = [{"id": f"f{i}", "samples": FLAT} for i in range(20)]
    kept, calls, metrics = _refill(flat, tasks_per_step=3, rounds=4)
    drawn = [tid for call in calls for tid in call]
    assert metrics["refill_rounds"] == 4 and len(drawn) == 15 == len(set(drawn))


def test_refill_signal_check_uses_the_overlong_buffer():
    # equal rewards, but 3 of 4 tokens is -0.5 in a buffer of 2: spread only with the buffer
    tasks = [{"id": f"t{i}", "samples": [[1.0], [1.0]], "tokens": [3, 2]} for i in range(6)]
    kept, calls, metrics = _refill(tasks, buffer=2)
    assert metrics["zero_spread_frac_before_refill"] == 0.0 and metrics["refill_rounds"] == 0
    assert len(kept) == 2 and len(calls) == 1
    _, _, metrics = _refill(tasks)
    assert metrics["zero_spread_frac_before_refill"] == 1.0
