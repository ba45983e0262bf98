"""experiments/: gspo_vs_grpo.py's arms, commands, mean ± spread over seeds and plots (no
training); moe_replay_small.py and engine_precision.py run in their smallest modes."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import engine_precision  # noqa: E402
import gspo_vs_grpo as harness  # noqa: E402
import moe_replay_small as moe  # noqa: E402


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


# ---- experiments/moe_replay_small.py and experiments/engine_precision.py, smallest modes -------


def test_peak_drop_is_the_fall_of_the_smoothed_reward_below_its_running_peak():
    assert moe.peak_drop([0.1] * 5 + [0.9] * 10) == pytest.approx(0.0, abs=1e-12)  # rising only
    rise_fall = [0.0] * 5 + [1.0] * 5 + [0.0] * 5
    assert moe.peak_drop(rise_fall) == pytest.approx(1.0)
    assert moe.peak_drop([0.0] * 5 + [1.0] * 5 + [0.6] * 5) == pytest.approx(0.4)
    row = {k: 0.0 for k in moe.STEP_KEYS}
    seed = moe.per_seed([{**row, "reward": r} for r in rise_fall])
    assert seed["collapsed"] == 1.0 and seed["reward_first"] == 0.0
    assert seed["stuck"] == 1.0  # ends at 0 with entropy 0
    assert moe.per_seed([{**row, "reward": 0.5, "entropy": 1.0}] * 6)["stuck"] == 0.0
    nan_update = moe.per_seed([{**row, "reward": 0.5, "loss": math.nan}])
    assert nan_update["nonfinite_loss_updates"] == 1.0 and nan_update["collapsed"] == 0.0


def _finite_numbers(obj) -> list[float]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _finite_numbers(v)]
    if isinstance(obj, list | tuple):
        return [x for v in obj for x in _finite_numbers(v)]
    return [float(obj)] if isinstance(obj, int | float) else []


@pytest.mark.slow
def test_moe_replay_small_one_step_per_arm(tmp_path):
    small = "--steps 1 --seeds 0 --experts 8 --top-k 2 --new-tokens 4 --prompts 2 --group 4"
    record = moe.main([*small.split(), "--minibatches", "2", "--out", str(tmp_path)])
    summary = record["summary"]
    assert set(summary) == set(moe.ARMS)
    for arm, m in summary.items():
        assert m["seeds"][0] == 1
        means = {k: v[0] for k, v in m.items()}
        assert all(math.isfinite(x) for x in means.values()), (arm, means)
        assert 0.0 <= means["reward_first"] <= 1.0 and means["skipped_steps"] == 0
        assert 0.0 < means["expert_volatility"] <= 1.0  # lr 1e-2 moves the routers in one step
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [len(r["steps"]) for r in saved["runs"]] == [1, 1, 1]
    assert all(set(moe.STEP_KEYS) <= set(r["steps"][0]) for r in saved["runs"])
    assert "| grpo-rr | 1 |" in (tmp_path / "summary.md").read_text()
    assert len(list((tmp_path / "runs").glob("*.json"))) == 3  # one file per finished run
    again = moe.main(["--report", str(tmp_path), "--out", str(tmp_path / "re")])
    assert json.dumps(again["summary"]) == json.dumps(summary)  # NaN SEs: compare as text


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_engine_precision_smallest_mode(tmp_path, dtype):
    argv = ["--models", "tiny", "--lengths", "4", "16", "--sequences", "4"]
    argv += ["--eps", "3e-4:4e-4", "1e-2", "--engine-dtype", dtype, "--out", str(tmp_path)]
    rows = engine_precision.main(argv)["models"]["tiny"]["rows"]
    assert [r["length"] for r in rows] == [4, 16] and rows[0]["sequences"] == 4
    assert all(math.isfinite(x) for x in _finite_numbers(rows))
    for r in rows:
        for eps in ("0.0003:0.0004", "0.01:0.01"):
            assert 0.0 <= r[f"clipped@{eps}"] <= r[f"outside@{eps}"] <= 1.0
    if dtype == "float32":  # the control: engine and trainer agree to float rounding
        assert max(r["token_log_ratio_std"] for r in rows) < 1e-4
        assert all(r["outside@0.0003:0.0004"] == 0.0 for r in rows)
    else:  # bf16 rounding is visible per token, and a 1% band contains every sequence
        assert rows[0]["token_log_ratio_std"] > 1e-4
        assert all(r["outside@0.01:0.01"] == 0.0 for r in rows)
    assert "ε 0.0003:0.0004" in (tmp_path / "summary.md").read_text()
