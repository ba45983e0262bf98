"""`python -m gspo_agents.train env=swe` as the README documents it, with a two-step cold start
on three tasks and one task a step: the cold start trains on whole multi-turn reference turns
that the rollouts could produce, episodes run in bubblewrap sessions on the shipped instances,
each is graded by the repository's tests, resolved/tests-pass means reach metrics.jsonl, and,
as the README says, a policy that resolves nothing stops the run after 3 steps that trained
nothing (zero reward spread) with exit status 1 (gspo_agents/step_errors.py)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from gspo_agents.config import CONFIG_DIR, register_schemas
from gspo_agents.models import ModelConfig, resolve_model
from gspo_agents.sft import SFT_CACHE, cache_key

pytestmark = pytest.mark.slow


def forget_cold_start(overrides: list[str]) -> None:
    """Drop this recipe's cached cold start (only this test uses it), so the run builds its
    examples and prints how many whole turns it trains on."""
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    key = cache_key(
        resolve_model(ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True))),
        cfg.env.name,
        OmegaConf.to_container(cfg.env.kwargs, resolve=True),
        OmegaConf.to_container(cfg.trainer.sft, resolve=True),
        cfg.trainer.seed,
    )
    shutil.rmtree(Path(SFT_CACHE).expanduser() / key, ignore_errors=True)


def test_the_swe_run_cold_starts_on_whole_turns_grades_every_episode_and_stops_as_documented(
    tmp_path,
):
    run_dir = tmp_path / "run"
    overrides = [
        "env=swe",
        "trainer.tasks_per_step=1",
        "rollout.num_samples_per_task=2",
        "trainer.sft.steps=2",
        "trainer.sft.batch_size=2",
        "trainer.sft.max_examples=3",  # 3 tasks: 9 turns (view, edit, submit)
        "logger.wandb_mode=disabled",
        "logger.samples_every_steps=1",  # every trajectory (2 a step) in samples/
    ]
    forget_cold_start(overrides)
    cmd = [sys.executable, "-m", "gspo_agents.train", *overrides, f"trainer.run_dir={run_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    err = proc.stderr
    # configs/env/swe.yaml's budgets fit every reference turn: no note says they would be cut
    assert "reference turns are up to" not in err, err[-4000:]
    assert "cold start: 9 examples from 3 tasks, whole turns" in err, err[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        assert r["rollout/error"] == 0 and r["rollout/truncated_by_prompt"] == 0, r
        assert "rollout/env/resolved" in r and "rollout/env/tests_pass_frac" in r, sorted(r)
    graded = []
    for path in sorted((run_dir / "samples").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            graded.append(json.loads(line)["info"]["turn_infos"][-1]["grade_reason"])
    assert len(graded) == 2 * len(rows) and "not graded" not in graded, graded
    if any(r["num_signal_seqs"] for r in rows):  # a policy that resolved something: it trains
        assert proc.returncode == 0 and len(rows) == 10, err[-4000:]
        return
    # the README's account of the CPU run: nothing resolved, 3 steps in a row trained nothing
    assert proc.returncode == 1 and [r["step"] for r in rows] == [1, 2, 3], err[-4000:]
    assert "stopping at step 3: 3 consecutive steps trained nothing" in err, err[-4000:]
    assert "zero reward spread" in err and "Traceback" not in err, err[-4000:]
