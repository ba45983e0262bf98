"""The custom-env recipes of envs/README_custom_env.md run as written and train.

The page's Python blocks become the user's package (`my_envs/echo.py`, `my_envs/units.py`), its
toml block the package's pyproject.toml, installed with pip (offline, into a private --target
directory instead of the page's `pip install -e .`, so other tests never see the plugin); then
each `python -m gspo_agents.train` command of the page runs verbatim in that directory. Training
must have happened, not merely exit 0: no trajectory cut before or by its context, groups with
reward spread, the policy moved (`num_signal_seqs`), and a reward column on the console.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_recipes import commands, package_files

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "envs" / "README_custom_env.md"
TRAIN = "python -m gspo_agents.train"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # real cold starts and trainings


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    """The user's package from the page, pip-installed into `site/`."""
    home = tmp_path_factory.mktemp("user")
    for rel, text in package_files(PAGE).items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    assert commands(PAGE, "pip") == [["pip", "install", "-e", "."]]
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "--no-index", "-q", "--target", str(home / "site"), str(home)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return home


def recipe(env_id: str) -> list[str]:
    (cmd,) = [c for c in commands(PAGE, TRAIN) if f"env.name={env_id}" in c]
    return [sys.executable, *cmd[1:]]


def run_recipe(user_dir: Path, env_id: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    cmd = recipe(env_id)
    path = os.pathsep.join([str(user_dir / "site"), str(ROOT)])
    proc = subprocess.run(
        cmd, cwd=user_dir, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path}
    )
    run_dir = user_dir / next(a.split("=", 1)[1] for a in cmd if a.startswith("trainer.run_dir="))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return proc, rows


def assert_trained(proc: subprocess.CompletedProcess, rows: list[dict], steps: int) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:  # every trajectory had room to answer
        assert r["rollout/truncated_by_prompt"] == r["rollout/truncated_by_context"] == 0, r
        assert r["errors"] == 0, r
    assert all(r["trained_nothing"] == 0.0 for r in rows), [r.get("untrained_reason") for r in rows]
    assert sum(r["num_signal_seqs"] for r in rows) > 0
    assert min(r["zero_spread_frac"] for r in rows) < 1.0  # groups with reward spread
    assert "reward_mean" in proc.stderr.splitlines()[-2]  # the console's last step line
    assert "trained nothing" not in proc.stderr and "Traceback" not in proc.stderr


def test_the_single_turn_recipe_trains_as_written(user_dir):
    proc, rows = run_recipe(user_dir, "myenv/Echo-v0")
    assert_trained(proc, rows, steps=20)
    assert "cold start: " in proc.stderr  # trained now, or reused from the cache
    assert "no reference_response" not in proc.stderr
    assert max(r["reward_mean"] for r in rows) > 0.5  # the cold start taught the answer


def test_the_tool_recipe_trains_as_written(user_dir):
    proc, rows = run_recipe(user_dir, "myenv/Units-v0")
    assert_trained(proc, rows, steps=12)
    # the context was fitted to the tool prompt, and the model called the tool
    assert "note: myenv/Units-v0's prompts are up to" in proc.stderr
    assert max(r["rollout/env/tool_calls"] for r in rows) > 0
    assert max(r["reward_mean"] for r in rows) > 0
