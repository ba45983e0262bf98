"""`python -m gspo_agents.train model.lora.rank=8` end to end: the default env trained through
LoRA adapters (LocalEngine fed the merged weights each step), checkpointed with the adapters
alone, and resumed exactly: a run stopped after step 2 and resumed gives the rewards of the
uninterrupted run bit for bit, and its losses and weights to the last bits (in which two LoRA
runs from scratch already differ: ratio_max by 1e-7 at step 2, before any resume)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemReader

pytestmark = pytest.mark.slow

# the default cold start (its cache is shared with the default run), a small RL step
LORA_RUN = [
    "model.lora.rank=8",
    "model.lora.alpha=16",
    "trainer.lr=3e-3",
    "trainer.tasks_per_step=2",
    "rollout.num_samples_per_task=8",
    "trainer.save_every_steps=0",
    "trainer.max_failed_steps=0",
    "logger.wandb_mode=disabled",
]
EXACT = ("reward_mean", "num_trajectories")
CLOSE = ("loss", "grad_norm", "clip_frac_tokens", "ratio_max")


def train(run_dir: Path, *overrides: str) -> None:
    cmd = [sys.executable, "-m", "gspo_agents.train", f"trainer.run_dir={run_dir}"]
    proc = subprocess.run(
        [*cmd, *LORA_RUN, *overrides], capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_lora_run_resumes_exactly_and_checkpoints_only_the_adapters(tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(straight, "trainer.steps=3")
    train(split, "trainer.steps=2")
    keys = FileSystemReader(str(split / "checkpoint" / "dcp")).read_metadata().state_dict_metadata
    model_keys = [k for k in keys if k.startswith("model.")]
    assert model_keys and all(".lora_" in k for k in model_keys), model_keys[:5]
    train(split, "trainer.steps=3")
    a, b = rows(straight), rows(split)
    assert [r["step"] for r in b] == [1, 2, 3]
    for ra, rb in zip(a, b, strict=True):
        assert [ra[k] for k in EXACT] == [rb[k] for k in EXACT], ra["step"]  # bit for bit
        for k in CLOSE:  # two runs from scratch already differ in these in the last bits
            assert rb[k] == pytest.approx(ra[k], rel=1e-5, abs=1e-7), (ra["step"], k)
    assert any(r["loss"] != 0 for r in a)  # some step had reward spread: adapters trained
    wa = load_file(str(straight / "weights" / "step3" / "model.safetensors"))
    wb = load_file(str(split / "weights" / "step3" / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-6, msg=k)
    adapter = load_file(str(split / "weights" / "step3" / "adapter" / "adapter_model.safetensors"))
    assert adapter and all(".lora_" in k for k in adapter)
