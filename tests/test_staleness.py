"""Staleness bookkeeping: pure functions, no event loop, model or server."""

from __future__ import annotations

import pytest

from gspo_agents.rollout.staleness import (
    drop_stale,
    is_stale,
    max_prefetch_depth,
    staleness,
)
from gspo_agents.trajectory import Status, Trajectory


def _traj(*versions_per_piece: tuple[int, int]) -> Trajectory:
    """A trajectory whose model tokens were made by (version, count) pieces, in order."""
    t = Trajectory(prompt_ids=[1, 2, 3], status=Status.COMPLETE, reward=1.0)
    for version, count in versions_per_piece:
        t.append_model(list(range(count)), [-0.5] * count, version)
    return t


def test_staleness_is_measured_from_the_oldest_token():
    mixed = _traj((3, 4), (5, 2))  # resumed under version 5 after an update
    assert mixed.min_version == 3
    assert staleness(mixed.min_version, current_version=5) == 2
    assert staleness(None, current_version=7) == 0  # no model token yet


def test_max_staleness_zero_is_on_policy():
    assert not is_stale(4, 4, max_staleness_steps=0)
    assert is_stale(3, 4, max_staleness_steps=0)
    assert not is_stale(3, 4, max_staleness_steps=1)
    assert is_stale(2, 4, max_staleness_steps=1)
    assert not is_stale(None, 9, max_staleness_steps=0)


def test_a_token_from_the_future_is_a_bug():
    with pytest.raises(ValueError, match="versions must only grow"):
        staleness(6, current_version=5)


def test_negative_bound_is_rejected_with_the_field_name():
    with pytest.raises(ValueError, match="max_staleness_steps"):
        is_stale(1, 1, -1)
    with pytest.raises(ValueError, match="max_staleness_steps"):
        max_prefetch_depth(-1)


def test_drop_stale_keeps_fresh_group_members_and_counts_the_rest():
    fresh, one_old, two_old = _traj((5, 3)), _traj((4, 2), (5, 1)), _traj((3, 3))
    groups = [[fresh, two_old], [two_old], [one_old, fresh]]
    report = drop_stale(groups, current_version=5, max_staleness_steps=1)
    assert report.groups == [[fresh], [one_old, fresh]]  # the all-stale group disappears
    assert report.dropped == 2
    assert report.max_kept_staleness == 1
    assert report.mean_kept_staleness == pytest.approx(1 / 3)


def test_drop_stale_with_nothing_stale_is_identity():
    groups = [[_traj((2, 1)), _traj((2, 5))]]
    report = drop_stale(groups, current_version=2, max_staleness_steps=0)
    assert report.groups == groups and report.dropped == 0


def test_prefetch_depth_follows_the_staleness_bound():
    assert max_prefetch_depth(0) == 1  # one batch ahead; its old tokens get dropped
    assert max_prefetch_depth(1) == 1
    assert max_prefetch_depth(3) == 3
