"""FSDP2 over gloo under torchrun: 2 processes train like 1, and SIGKILL + resume is exact."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from launch import DIST_DIR, torchrun  # noqa: E402
from tiny import build_tiny_model  # noqa: E402

SCRIPT = "train_learner.py"


def _single_process(*args: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    cmd = [sys.executable, str(DIST_DIR / SCRIPT), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final" / "model.safetensors"))


def test_two_gloo_processes_train_like_one(dense_dir, tmp_path):
    # 10 rows in 4 minibatches (3, 3, 2, 2) with a one-row token budget: the ranks hold unequal
    # numbers of micro-batches, so the dummy micro-batches that keep FSDP in step are exercised.
    # The sharded run also recomputes activations (activation checkpointing): same numbers.
    common = ["--model", dense_dir, "--steps", "3", "--micro-batch-tokens", "24"]
    _single_process(*common, "--out", str(tmp_path / "one"))
    two = ["--out", str(tmp_path / "two"), "--activation-checkpointing"]
    torchrun(SCRIPT, *common, *two, nproc=2)
    one, two = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    assert [m["world_size"] for m in one + two] == [1] * 3 + [2] * 3
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "clip_frac_tokens", "ratio_mean", "approx_kl", "lr"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
        assert b["optimizer_steps"] == a["optimizer_steps"]
    w1, w2 = _final_weights(tmp_path / "one"), _final_weights(tmp_path / "two")
    start = load_file(str(Path(dense_dir) / "model.safetensors"))
    moved = max(float((w1[k] - start[k]).abs().max()) for k in w1)
    assert moved > 1e-3  # the runs trained
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=1e-5, msg=k)


@pytest.mark.slow  # 60-120 s under load; the fast tier keeps test_two_gloo_processes_train_like_one
def test_chunked_packed_fsdp2_trains_like_todays_single_process(dense_dir, tmp_path):
    # today's path (full logits, padded rows) in one process against the new one on 2 ranks: the
    # output layer chunked inside the root module's forward (its weight gathered by FSDP2) and
    # each rank's rows packed into one; a budget that keeps each rank's rows whole on both paths
    common = ["--model", dense_dir, "--steps", "2", "--micro-batch-tokens", "4096"]
    old = ["--logprob-chunk-tokens", "0", "--packing", "off"]
    _single_process(*common, *old, "--out", str(tmp_path / "one"))
    new = ["--logprob-chunk-tokens", "5", "--packing", "on"]  # sdpa: a dense document mask
    torchrun(SCRIPT, *common, *new, "--out", str(tmp_path / "two"), nproc=2)
    one, two = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "clip_frac_tokens", "ratio_mean", "entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
    assert 0 < one[0]["entropy"] < math.log(300)
    w1, w2 = _final_weights(tmp_path / "one"), _final_weights(tmp_path / "two")
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=1e-5, msg=k)


@pytest.mark.slow
def test_sigkill_mid_training_then_resume_matches_uninterrupted(dense_dir, tmp_path):
    common = ["--model", dense_dir, "--steps", "5", "--save-every", "2"]
    torchrun(SCRIPT, *common, "--out", str(tmp_path / "straight"), "--ckpt", str(tmp_path / "c1"))
    ckpt = str(tmp_path / "c2")
    killed = tmp_path / "killed"
    # rank 0 SIGKILLs itself after step 2; the last checkpoint is from after step 1
    with pytest.raises(RuntimeError, match="SIGKILL|Signal 9|exited"):
        torchrun(SCRIPT, *common, "--out", str(killed), "--ckpt", ckpt, "--kill-after-step", "2")
    assert not (killed / "final").exists()
    torchrun(SCRIPT, *common, "--out", str(killed), "--ckpt", ckpt, "--resume")
    straight, resumed = _metrics(tmp_path / "straight"), _metrics(killed)
    assert [m["step"] for m in resumed] == [0, 1, 2, 2, 3, 4]  # step 2 was lost and redone
    assert resumed[3:] == straight[2:]  # every metric, bit for bit
    w1, w2 = _final_weights(tmp_path / "straight"), _final_weights(killed)
    for k in w1:
        assert torch.equal(w1[k], w2[k]), k


@pytest.mark.slow  # 60-120 s under load; the fast tier keeps test_two_gloo_processes_train_like_one
def test_off_policy_options_under_fsdp2_train_like_one_process(dense_dir, tmp_path):
    # decoupled anchor (recomputed on the sharded model, all-reduced), truncated IS weights and
    # token-mean aggregation (a global token count) give the single-process step on 2 ranks
    common = ["--model", dense_dir, "--steps", "2", "--micro-batch-tokens", "24"]
    common += ["--old-logprobs", "decoupled", "--seq-is-cap", "1.01", "--loss-agg", "token-mean"]
    _single_process(*common, "--out", str(tmp_path / "one"))
    torchrun(SCRIPT, *common, "--out", str(tmp_path / "two"), nproc=2)
    one, two = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "is_ess", "engine_logratio_seq_mean", "is_truncated_frac"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
    assert 0.0 < one[0]["is_truncated_frac"] < 1.0
    w1, w2 = _final_weights(tmp_path / "one"), _final_weights(tmp_path / "two")
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=1e-5, msg=k)


@pytest.mark.slow  # 60-120 s under load; the fast tier keeps test_two_gloo_processes_train_like_one
def test_kl_entropy_and_ppo_epochs_under_fsdp2_train_like_one_process(dense_dir, tmp_path):
    # the frozen reference is sharded like the policy; its log-probs are all-reduced
    common = ["--model", dense_dir, "--steps", "2", "--micro-batch-tokens", "24"]
    common += ["--kl-coef", "0.5", "--entropy-coef", "0.01", "--ppo-epochs", "2"]
    _single_process(*common, "--out", str(tmp_path / "one"))
    torchrun(SCRIPT, *common, "--out", str(tmp_path / "two"), nproc=2)
    one, two = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "kl_ref", "entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
    assert one[1]["kl_ref"] > 0.0 and one[0]["optimizer_steps"] == 8
    w1, w2 = _final_weights(tmp_path / "one"), _final_weights(tmp_path / "two")
    # 16 Adam steps at lr 1e-3: the chunked head sums each rank's chunks in another order, and
    # Adam turns a rounding-level gradient difference on a near-zero gradient into up to ~lr per
    # step (measured: 1.1e-5 on the tied embedding, ~1% of lr); a wrong reduction is ~lr per step
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=3e-5, msg=k)


@pytest.mark.slow
def test_tiny_moe_routing_replay_under_fsdp2(tmp_path):
    moe_dir = build_tiny_model(tmp_path / "moe", moe=True)
    out = tmp_path / "run"
    args = ["--model", moe_dir, "--steps", "2", "--lr", "1e-2", "--routing-replay"]
    torchrun(SCRIPT, *args, "--out", str(out))
    for m in _metrics(out):
        assert 0.0 < m["expert_volatility"] <= 1.0
        assert math.isfinite(m["loss"]) and m["skipped_steps"] == 0


@pytest.mark.slow
def test_tiny_moe_trains_under_fsdp2_and_logs_volatility(tmp_path):
    moe_dir = build_tiny_model(tmp_path / "moe", moe=True)
    out = tmp_path / "run"
    torchrun(SCRIPT, "--model", moe_dir, "--steps", "2", "--lr", "1e-2", "--out", str(out))
    metrics = _metrics(out)
    assert len(metrics) == 2
    for m in metrics:
        assert 0.0 < m["expert_volatility"] <= 1.0
        assert math.isfinite(m["loss"]) and m["skipped_steps"] == 0
    assert (out / "final" / "model.safetensors").is_file()


def test_lora_under_fsdp2_trains_like_one_process_and_keeps_the_base_frozen(dense_dir, tmp_path):
    # adapters of rank 4 on every linear map, with a KL penalty whose reference is the frozen
    # base (the same modules with the adapters disabled): 2 ranks compute what 1 does
    # (lr 1e-3: Adam turns the last bits in which 1 and 2 ranks' gradients differ into
    # whole steps for elements whose gradient is near 0, as in full fine-tuning)
    common = ["--model", dense_dir, "--steps", "2", "--lora-rank", "4", "--kl-coef", "0.1"]
    _single_process(*common, "--out", str(tmp_path / "one"))
    torchrun(SCRIPT, *common, "--out", str(tmp_path / "two"), nproc=2)
    one, two = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "kl_ref", "clip_frac_tokens"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
    assert one[-1]["kl_ref"] > 0  # the adapters moved the policy away from the base
    w1, w2 = _final_weights(tmp_path / "one"), _final_weights(tmp_path / "two")
    start = load_file(str(Path(dense_dir) / "model.safetensors"))
    assert set(w1) == set(start)  # merged: the base model's own names, no adapter tensors
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=1e-5, msg=k)
        if "proj" in k:
            continue
        assert torch.equal(w1[k], start[k]), k  # norms and embeddings: frozen
    assert max(float((w1[k] - start[k]).abs().max()) for k in w1 if "q_proj" in k) > 1e-4
    adapter = tmp_path / "two" / "final" / "adapter"
    assert (adapter / "adapter_config.json").is_file()
    assert all(".lora_" in k for k in load_file(str(adapter / "adapter_model.safetensors")))


# three 2-rank launches: slow like its full-weight twin test_sigkill_mid_training_then_resume_...;
# the fast tier keeps the cheaper LoRA-under-FSDP2 test above
@pytest.mark.slow
def test_lora_sigkill_then_resume_under_fsdp2_is_exact(dense_dir, tmp_path):
    common = ["--model", dense_dir, "--steps", "4", "--save-every", "2", "--lora-rank", "4"]
    torchrun(SCRIPT, *common, "--out", str(tmp_path / "straight"), "--ckpt", str(tmp_path / "c1"))
    ckpt = str(tmp_path / "ck")
    killed = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="SIGKILL|Signal 9|exited"):
        torchrun(SCRIPT, *common, "--out", str(killed), "--ckpt", ckpt, "--kill-after-step", "2")
    # the checkpoint holds the adapters and their optimizer state, not the frozen base
    from torch.distributed.checkpoint import FileSystemReader

    keys = list(FileSystemReader(str(Path(ckpt) / "dcp")).read_metadata().state_dict_metadata)
    model_keys = [k for k in keys if k.startswith("model.")]
    assert model_keys and all(".lora_" in k for k in model_keys), model_keys
    assert any(k.startswith("optim.state.") and ".lora_" in k for k in keys)
    torchrun(SCRIPT, *common, "--out", str(killed), "--ckpt", ckpt, "--resume")
    straight, resumed = _metrics(tmp_path / "straight"), _metrics(killed)
    assert [m["step"] for m in resumed] == [0, 1, 2, 2, 3]
    assert resumed[3:] == straight[2:]  # every metric, bit for bit
    w1, w2 = _final_weights(tmp_path / "straight"), _final_weights(killed)
    for k in w1:
        assert torch.equal(w1[k], w2[k]), k
