"""Pure batching decisions: task order and the rollout → learner batch."""

from gspo_agents.batching import prepare_batch, tasks_for_step
from gspo_agents.trajectory import Status, Trajectory


def traj(group: str, reward: float | None, status=Status.COMPLETE) -> Trajectory:
    t = Trajectory(prompt_ids=[1, 2], group_id=group)
    t.append_model([3, 4], [-0.5, -0.5], version=0)
    t.status, t.reward = status, reward
    return t


def test_tasks_cover_each_epoch_once_and_are_reproducible():
    tasks = [{"id": i} for i in range(10)]
    first_epoch = [t["id"] for s in range(5) for t in tasks_for_step(tasks, s, 2, seed=7)]
    assert sorted(first_epoch) == list(range(10))
    assert tasks_for_step(tasks, 3, 4, seed=7) == tasks_for_step(tasks, 3, 4, seed=7)
    assert tasks_for_step(tasks, 0, 10, seed=1) != tasks_for_step(tasks, 0, 10, seed=2)
    assert len(tasks_for_step(tasks, 2, 4, seed=0)) == 4  # wraps across the epoch boundary


def test_errors_are_counted_not_scored_and_zero_spread_groups_are_filtered():
    groups = [
        [traj("a", 1.0), traj("a", 0.0), traj("a", None, Status.ERROR)],
        [traj("b", 1.0), traj("b", 1.0)],  # no spread: no signal
    ]
    prep = prepare_batch(groups, pad_id=0)
    assert prep.metrics["num_error"] == 1
    assert prep.metrics["num_trained_seqs"] == 2
    assert prep.metrics["reward_mean"] == 0.75  # the error is not a 0
    assert prep.metrics["zero_spread_frac"] == 0.5
    adv = prep.batch.advantages_BT[:, 2]
    assert adv[0] > 0 > adv[1]
    kept = prepare_batch(groups, pad_id=0, filter_zero_spread=False)
    assert kept.metrics["num_trained_seqs"] == 4


def test_no_signal_gives_no_batch():
    prep = prepare_batch([[traj("a", 0.0), traj("a", 0.0)]], pad_id=0)
    assert prep.batch is None and prep.metrics["num_trained_seqs"] == 0
