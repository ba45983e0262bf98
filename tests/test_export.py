"""`python -m gspo_agents.export`: a run's weights as a loadable HF directory with a model card.

The run dirs here are made by a real Learner (full fine-tuning and LoRA) after one update, as
`train.py` makes them (weights/stepN from `export_hf`, config.yaml, metrics.jsonl); what the
export writes is loaded back with `AutoModelForCausalLM.from_pretrained` and must compute the
learner's own logits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from engine_helpers import tiny_model_path

from gspo_agents.export import main as export_main
from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.models import LoraConfig

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402


def make_run(run_dir: Path, lora_rank: int) -> torch.Tensor:
    """A run dir after 2 steps; returns the learner's logits on a fixed input."""
    cfg = LearnerConfig(lr=2e-2, num_minibatches=2, lora=LoraConfig(rank=lora_rank, alpha=8.0))
    learner = Learner(tiny_model_path(), cfg)
    batch = synthetic_batch(0, batch_size=4)
    batch = with_old_logprobs(batch, learner.compute_logprobs(batch), noise=0.02, seed=0)
    learner.update(batch)
    learner.export_hf(str(run_dir / "weights" / "step2"))
    config = {
        "env": {"name": "arithmetic"},
        "model": {"name": "tiny", "path": None, "lora": {"rank": lora_rank, "alpha": 8.0}},
        "algorithm": {"name": "gspo"},
        "trainer": {"lr": 0.02, "tasks_per_step": 2},
        "rollout": {"num_samples_per_task": 4},
    }
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"step": 1, "reward_mean": 0.25, "loss": 0.1}, {"step": 2, "reward_mean": 0.5}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    learner.model.eval()
    with torch.no_grad():
        return learner.model(input_ids=INPUT).logits


INPUT = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])


def logits_of(path: Path) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    with torch.no_grad():
        return model(input_ids=INPUT).logits


def check_card(out: Path, kind: str) -> str:
    card = (out / "README.md").read_text()
    assert kind in card and "`arithmetic`" in card and "for 2 steps" in card
    assert "| reward_mean | 0.5 |" in card  # the final step's metrics
    assert "lr: 0.02" in card  # the training config, verbatim
    return card


def test_full_weight_export_loads_with_tokenizer_and_the_runs_logits(tmp_path):
    from transformers import AutoTokenizer

    run = tmp_path / "run"
    want = make_run(run, lora_rank=0)
    assert export_main([str(run)]) == 0
    out = run / "export-step2"
    torch.testing.assert_close(logits_of(out), want, rtol=0, atol=1e-5)
    assert AutoTokenizer.from_pretrained(str(out)).encode("1+2") == AutoTokenizer.from_pretrained(
        tiny_model_path()
    ).encode("1+2")
    check_card(out, "library_name: transformers")
    assert export_main([str(run), "--merge-lora"]) == 1  # nothing to merge: refused


def test_lora_adapter_and_merged_exports_both_load_and_match_the_learner(tmp_path):
    run = tmp_path / "run"
    want = make_run(run, lora_rank=4)
    assert export_main([str(run), "--out", str(tmp_path / "adapter")]) == 0
    assert export_main([str(run), "--merge-lora", "--out", str(tmp_path / "merged")]) == 0
    adapter, merged = tmp_path / "adapter", tmp_path / "merged"
    assert (adapter / "adapter_config.json").is_file()
    assert not (adapter / "model.safetensors").exists()  # the adapter alone, PEFT format
    assert not (merged / "adapter_config.json").exists()
    torch.testing.assert_close(logits_of(adapter), want, rtol=0, atol=1e-5)  # base + adapter
    torch.testing.assert_close(logits_of(merged), want, rtol=0, atol=1e-5)
    base = logits_of(Path(tiny_model_path()))
    assert float((base - want).abs().max()) > 1e-3  # the adapter changed the model
    card = check_card(adapter, "LoRA adapter (rank 4)")
    assert tiny_model_path() in card  # where the base model is
    check_card(merged, "LoRA rank 4, merged")


def test_bad_run_dirs_and_steps_fail_in_one_line(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "gspo_agents.export", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    (tmp_path / "empty").mkdir()
    for args, says in [
        ((str(tmp_path / "missing"),), "is not a directory"),
        ((str(tmp_path / "empty"),), "has no exported weights"),
    ]:
        proc = run(*args)
        assert proc.returncode == 1 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "empty" / "weights" / "step3").mkdir(parents=True)
    proc = run(str(tmp_path / "empty"), "--step", "1")
    assert proc.returncode == 1 and "has step3" in proc.stderr, proc.stderr


@pytest.mark.parametrize("token", [None, "hf_not_a_real_token"])
def test_push_is_refused_without_a_token_or_network_in_one_line(tmp_path, token, monkeypatch):
    run = tmp_path / "run"
    (run / "weights" / "step1").mkdir(parents=True)
    (run / "weights" / "step1" / "config.json").write_text("{}")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("HF_")}
    env["HF_HOME"] = str(tmp_path / "hf")  # no stored login
    if token:
        env["HF_TOKEN"] = token
        env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens: no network to the Hub
    cmd = [sys.executable, "-m", "gspo_agents.export", str(run), "--push-to-hub", "me/model"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    if token is None:
        assert "needs a Hugging Face token" in errors[0] and "HF_TOKEN" in errors[0]
        assert not (run / "export-step1").exists()  # refused before writing anything
    else:
        assert "could not reach the Hugging Face Hub" in errors[0]
        assert (run / "export-step1" / "README.md").is_file()  # the export itself is complete
