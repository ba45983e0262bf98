"""Numerics regression: a seeded tiny training run must reproduce its golden curve.

The run (arithmetic env, tiny model built from scratch, a 30-step SFT cold start, five GSPO steps)
is seeded end to end: model init, SFT batches, per-request sampling seeds, learner minibatches.
Its per-step metrics and a checksum of the final weights are compared with tests/golden/run.json.
A refactor that changes no numerics passes; one that changes sampling, the loss, the optimizer or
the data order fails, naming the first step and metric that moved.

Tolerance: rel 1e-5, abs 1e-7 per value. On one machine the run is bit-identical (the tolerance
is not needed there); across CPUs and thread counts float32 reductions may be summed in another
order, which moves values by ~1e-7 relative, and a loss that is a near-cancelling sum of
advantage-weighted ratios (~1e-8 here when no sequence is clipped) by ~1e-8 absolute. Any real
change moves them by orders of magnitude more: a different sampled token or update changes every
later step. The config is sized so that every step has reward signal and a non-zero update.

Regenerate on purpose (after an intended numerics change, e.g. a new sampler), then review and
commit the diff of tests/golden/run.json:

    GSPO_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden_run.py
"""

import json
import math
import os
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file

from gspo_agents import train
from gspo_agents.config import CONFIG_DIR, register_schemas

GOLDEN = Path(__file__).parent / "golden" / "run.json"
UPDATE_ENV = "GSPO_UPDATE_GOLDEN"
REL_TOL, ABS_TOL = 1e-5, 1e-7

OVERRIDES = [
    "env=arithmetic",
    "model=tiny",
    "algorithm=gspo",
    "logger=none",
    "trainer.seed=0",
    "trainer.steps=5",
    "trainer.tasks_per_step=4",
    "rollout.num_samples_per_task=16",
    "trainer.sft.steps=30",
    "trainer.sft.batch_size=16",
    "trainer.sft.lr=2e-2",
    "algorithm.filter_zero_spread_groups=false",  # every step updates, signal or not
]
# Per-step metrics kept in the golden file: the curve (reward, loss), the GSPO clip statistics,
# the update's size, and the sampled length (the first thing a sampling change moves).
STEP_KEYS = [
    "reward_mean",
    "loss",
    "clip_frac_tokens",
    "clip_frac_seqs",
    "ratio_max",
    "approx_kl",
    "grad_norm",
    "rollout/response_tokens_mean",
]


def run_seeded(run_dir: Path) -> dict:
    """Train with OVERRIDES into run_dir; return the per-step metrics and final weight checksum."""
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[*OVERRIDES, f"trainer.run_dir={run_dir}"])
    summary = train.run(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = run_dir / "weights" / f"step{summary['final_step']}"
    return {
        "steps": [{"step": r["step"], **{k: r.get(k) for k in STEP_KEYS}} for r in rows],
        "final_weights": weight_checksum(final),
    }


def weight_checksum(model_dir: Path) -> dict[str, float]:
    """Sum and sum of squares of every exported weight, in float64 (order-independent enough
    to survive a change of file layout, sensitive to any change of a value)."""
    total, squares = 0.0, 0.0
    for shard in sorted(model_dir.glob("*.safetensors")):
        for _, tensor_W in sorted(load_file(str(shard)).items()):
            w = tensor_W.to(torch.float64)
            total += float(w.sum())
            squares += float((w * w).sum())
    if total == 0.0 and squares == 0.0:
        raise FileNotFoundError(f"no weights in {model_dir} (expected *.safetensors)")
    return {"sum": total, "sq_sum": squares}


def differences(golden: dict, got: dict) -> list[str]:
    """One line per value outside the tolerance, in step order."""
    lines = []
    if len(golden["steps"]) != len(got["steps"]):
        lines.append(
            f"steps: golden has {len(golden['steps'])}, the run logged {len(got['steps'])}"
        )
    for want_row, got_row in zip(golden["steps"], got["steps"]):
        for key in ["step", *STEP_KEYS]:
            line = _compare(f"step {want_row['step']} {key}", want_row.get(key), got_row.get(key))
            if line:
                lines.append(line)
    for key, want in golden["final_weights"].items():
        line = _compare(f"final weights {key}", want, got["final_weights"].get(key))
        if line:
            lines.append(line)
    return lines


def _compare(name: str, want, got) -> str | None:
    if want is None or got is None:
        return None if want is got else f"{name}: golden {want!r}, got {got!r}"
    if math.isclose(want, got, rel_tol=REL_TOL, abs_tol=ABS_TOL):
        return None
    rel = abs(got - want) / max(abs(want), 1e-30)
    return f"{name}: golden {want!r}, got {got!r} (rel diff {rel:.2e})"


@pytest.mark.slow  # ~30 s of CPU: model build, SFT, five steps
def test_seeded_tiny_run_reproduces_the_golden_curve(tmp_path, monkeypatch):
    # A private HOME: the tiny model and the SFT cold start are built by this run, not reused
    # from ~/.cache, so a change in either is caught too.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    got = run_seeded(tmp_path / "run")
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        record = {"overrides": OVERRIDES, "torch": torch.__version__, **got}
        GOLDEN.write_text(json.dumps(record, indent=1) + "\n")
        pytest.skip(f"rewrote {GOLDEN}; review `git diff {GOLDEN}` and commit it")
    if not GOLDEN.exists():
        pytest.fail(f"{GOLDEN} is missing; create it with {UPDATE_ENV}=1 (see module docstring)")
    golden = json.loads(GOLDEN.read_text())
    if golden["overrides"] != OVERRIDES:
        pytest.fail(f"OVERRIDES changed since {GOLDEN} was written; regenerate with {UPDATE_ENV}=1")
    diff = differences(golden, got)
    if diff:
        pytest.fail(
            f"the seeded run moved away from {GOLDEN.name} (rel {REL_TOL}, abs {ABS_TOL}):\n  "
            + "\n  ".join(diff)
            + f"\nan intended numerics change? regenerate: {UPDATE_ENV}=1 python -m pytest "
            "tests/test_golden_run.py, then review the diff",
            pytrace=False,
        )


def test_golden_comparison_names_the_step_and_metric():
    golden = {
        "steps": [{"step": 1, "loss": 0.5, "reward_mean": 0.25}],
        "final_weights": {"sum": 10.0},
    }
    same = json.loads(json.dumps(golden))
    same["steps"][0]["loss"] = 0.5 * (1 + 1e-7)  # within tolerance: summation-order noise
    assert differences(golden, same) == []
    moved = json.loads(json.dumps(golden))
    moved["steps"][0]["loss"] = 0.51
    moved["final_weights"]["sum"] = 10.1
    lines = differences(golden, moved)
    assert len(lines) == 2
    assert lines[0].startswith("step 1 loss: golden 0.5, got 0.51")
    assert lines[1].startswith("final weights sum: golden 10.0, got 10.1")
