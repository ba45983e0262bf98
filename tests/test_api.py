"""The Python API and model resolution from the local Hugging Face cache.

- `Trainer(*overrides)` composes the same config as the CLI (and rejects the same mistakes);
  the README's Python example is extracted from README.md and run as written.
- `model=hf model.path=ORG/NAME` resolves from a real on-disk HF cache layout (HF_HUB_CACHE),
  and names the fix when the model is absent; nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_recipes import metrics_rows, readme_python_block, run_python_example

from gspo_agents import Trainer
from gspo_agents.config import ConfigError
from gspo_agents.models import ModelConfig, ModelConfigError, resolve_model

ROOT = Path(__file__).resolve().parents[1]


def test_trainer_composes_the_clis_config():
    trainer = Trainer("env=math", "trainer.steps=7")
    assert trainer.config.trainer.steps == 7
    assert trainer.config.env.name == "math"
    assert trainer.config.rollout.max_new_tokens_per_turn == 256  # configs/env/math.yaml


def test_trainer_rejects_a_typo_with_a_suggestion():
    with pytest.raises(ConfigError, match="Did you mean 'arithmetic'"):
        Trainer("env=arithmetc")
    with pytest.raises(ConfigError, match="use 2 or more"):
        Trainer("rollout.num_samples_per_task=1")


def readme_python_example() -> str:
    return readme_python_block("from gspo_agents import Trainer", without="reward_funcs")


@pytest.mark.slow  # a real (tiny) training, about a minute
def test_the_readme_python_example_runs_as_written(tmp_path):
    """Verbatim, in a fresh directory: it trains into its own run dir (not the default one that
    the README's next command would resume), and training happened."""
    proc = run_python_example(readme_python_example(), tmp_path, timeout_s=3600)
    assert "final_step" in proc.stdout
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["api-demo"]
    rows = metrics_rows(tmp_path / "runs/api-demo")
    assert [r["step"] for r in rows] == list(range(1, 11))
    assert all(r["rollout/truncated_by_prompt"] == 0 for r in rows)
    assert sum(r["num_signal_seqs"] for r in rows) > 0  # groups with reward spread moved it
    assert "reward_mean" in proc.stderr


def fake_hf_cache(root: Path, model_id: str, source: str) -> Path:
    """The hub cache layout: models--ORG--NAME/{refs/main, snapshots/<rev>/...}."""
    repo = root / ("models--" + model_id.replace("/", "--"))
    rev = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / rev
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    return snapshot


def test_hf_model_id_resolves_from_the_local_cache(tmp_path, monkeypatch):
    tiny = resolve_model(ModelConfig(name="tiny"))
    cache = tmp_path / "hub"
    snapshot = fake_hf_cache(cache, "acme/tiny-qwen", tiny)
    code = (
        "from gspo_agents.models import ModelConfig, resolve_model; "
        "print(resolve_model(ModelConfig(name='hf', path='acme/tiny-qwen')))"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Path(proc.stdout.strip()) == snapshot


def test_hf_model_id_absent_from_the_cache_names_the_fix():
    with pytest.raises(ModelConfigError, match="no local copy of this model") as info:
        resolve_model(ModelConfig(name="hf", path="acme/not-downloaded-model"))
    assert "huggingface-cli download acme/not-downloaded-model" in str(info.value)
