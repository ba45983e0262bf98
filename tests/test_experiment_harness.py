"""experiments/gspo_vs_grpo.py: arms, commands, mean ± spread over seeds, plots (no training)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import gspo_vs_grpo as harness  # noqa: E402


def _write_run(run_dir: Path, rewards: list[float], **const: float) -> None:
    run_dir.mkdir(parents=True)
    rows = [{"step": i + 1, "reward_mean": r, **const} for i, r in enumerate(rewards)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_arm_groups_expand_and_unknown_arms_are_named():
    assert harness.expand_arms(["moe"]) == ["moe-gspo", "moe-grpo", "moe-grpo-rr"]
    assert set(harness.expand_arms(["all"])) == {
        a for a, arm in harness.ARMS.items() if arm.group in ("dense", "moe", "chain")
    }
    assert harness.expand_arms(["dense-grpo", "dense"])[0] == "dense-grpo"
    with pytest.raises(SystemExit, match="unknown arm 'dense-ppo'"):
        harness.expand_arms(["dense-ppo"])


def test_every_arm_is_a_valid_training_command(tmp_path):
    from hydra import compose, initialize_config_dir

    from gspo_agents.config import check_choices, register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=harness_config_dir(), version_base=None):
        for arm in harness.ARMS:
            cmd = harness.command(arm, 2, 5, tmp_path, ["trainer.tasks_per_step=2"])
            assert cmd[1:3] == ["-m", "gspo_agents.train"]
            cfg = compose(config_name="config", overrides=cmd[3:])
            check_choices(cfg)
            assert cfg.trainer.seed == 2 and cfg.trainer.steps == 5
            assert cfg.trainer.run_dir == str(tmp_path / arm / "seed2")
    assert "algorithm.routing_replay=true" in harness.command("moe-grpo-rr", 0, 1, tmp_path, [])


def harness_config_dir() -> str:
    from gspo_agents.config import CONFIG_DIR

    return CONFIG_DIR


def test_mean_and_sample_spread_over_seeds(tmp_path):
    rewards = {0: [0.0] * 9 + [0.5], 1: [0.1] * 9 + [0.7], 2: [0.2] * 9 + [0.9]}
    dirs = []
    for seed, r in rewards.items():
        d = tmp_path / "dense-gspo" / f"seed{seed}"
        _write_run(d, r, clip_frac_tokens=0.1 * seed)
        dirs.append(d)
    s = harness.summarize_arm(dirs)
    mean, std, n = s["reward_last"]
    assert (n, mean) == (3, pytest.approx(0.7))
    assert std == pytest.approx(statistics.stdev([0.5, 0.7, 0.9]))
    assert s["reward_first"][0] == pytest.approx(0.1)
    assert s["expert_volatility"] is None  # never logged: no number is made up
    table = harness.markdown({"dense-gspo": s}, 3)
    assert "0.7 ± 0.2" in table and "| dense-gspo | sequence |" in table
    steps, means, stds = harness.curves(dirs, "reward_mean")
    assert steps[-1] == 10 and means[-1] == pytest.approx(0.7)
    assert stds[0] == pytest.approx(0.1)
    written = harness.plot_group({"dense-gspo": dirs}, tmp_path / "plots")
    assert {p.name for p in written} == {"reward.png", "clip_fraction.png"}
    assert all(p.stat().st_size > 1000 for p in written)


def test_report_only_summarises_existing_runs(tmp_path, capsys):
    for seed in (0, 1, 2):
        _write_run(
            tmp_path / "moe-grpo-rr" / f"seed{seed}",
            [0.1 * seed] * 10,
            expert_volatility=0.01 * (seed + 1),
        )
    assert harness.main(["--arms", "moe-grpo-rr", "--out", str(tmp_path), "--report-only"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    vol = summary["arms"]["moe-grpo-rr"]["expert_volatility"]
    assert vol[0] == pytest.approx(0.02) and vol[2] == 3
    assert (tmp_path / "plots-moe" / "expert_volatility.png").is_file()
    assert "moe-grpo-rr" in capsys.readouterr().out
