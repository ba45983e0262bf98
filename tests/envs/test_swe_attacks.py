"""The red-team suite's plan (envs/swe/attacks.py): pure host-side checks, no sandbox. The
attacks themselves are played through the tools in test_swe_env.py and by CI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from envs.swe.agents import AGENTS, attack_plan
from envs.swe.attacks import ATTACKS, attack_calls, pairs
from envs.swe.instances import load_instances

SHIPPED = Path(__file__).parents[2] / "envs" / "swe" / "data" / "instances.jsonl"


def test_the_rotation_covers_every_instance_and_every_attack_several_times():
    instances = load_instances(SHIPPED)
    assert len(ATTACKS) >= 40
    plan = attack_plan(instances, per_instance=2, seed=7)
    oracle = [i for i, a in plan if a == "oracle"]
    assert sorted(oracle) == sorted(i.instance_id for i in instances)
    attacks = [(i, a) for i, a in plan if a != "oracle"]
    per_instance = Counter(i for i, _ in attacks)
    assert set(per_instance.values()) == {2} and len(set(attacks)) == len(attacks)
    per_attack = Counter(a for _, a in attacks)
    names = [a for a in AGENTS if a != "oracle"] + list(ATTACKS)
    assert set(per_attack) == set(names) and min(per_attack.values()) >= 3
    assert attack_plan(instances, per_instance=2, seed=7) == plan
    assert attack_plan(instances, per_instance=2, seed=8) != plan
    assert len(pairs(["a", "b"], names, per_instance=len(names), seed=0)) == 2 * len(names)


def test_every_attack_scripts_tool_calls_on_every_shipped_instance():
    for inst in load_instances(SHIPPED):
        for name in ATTACKS:
            calls = attack_calls(name, inst)
            assert calls[-1].count('"submit"') == 1 and len(calls) >= 2, (name, inst.instance_id)
