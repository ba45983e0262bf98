"""Codeforces-v0 `tiers`: the default CPU run trains on the easy tier only."""

import pytest

import envs


def test_tiers_keep_only_the_named_tiers_of_a_split():
    everything = envs.make("codeforces").load_tasks("train")
    easy = envs.make("codeforces", tiers=["easy"]).load_tasks("train")
    assert 0 < len(easy) < len(everything)
    assert {t["tier"] for t in easy} == {"easy"}
    assert {t["id"] for t in easy} == {t["id"] for t in everything if t["tier"] == "easy"}


def test_an_unknown_tier_names_the_tiers_that_exist():
    env = envs.make("codeforces", tiers=["eazy"])
    with pytest.raises(ValueError, match="'eazy'.*'easy', 'medium'"):
        env.load_tasks("train")
