"""Numerics regression that holds on any x86-64 Linux machine.

Two kinds of check, because a seeded training run is reproducible on one machine but not across
CPUs: float32 reductions are summed in another order on another vector width (AVX2 vs AVX-512),
which moves a logit by a last bit, which flips a rare sampled token, and a cold start at a high
learning rate turns that into a different run within a step. So:

1. Cross-machine golden values (tests/golden/numerics.json), only for quantities that are stable
   across CPUs within a tolerance:
   - the GSPO, GSPO-token and GRPO losses and their gradients on fixed inputs (rel 1e-5);
   - the loss and gradient of GSPO through a small Qwen3 with fixed weights and fixed tokens
     (rel 1e-4: a 2-layer forward and backward reassociates more sums);
   - the sampler: its counter-based uniforms (integer arithmetic, exact) and the tokens it draws
     from fixed probabilities with fixed seeds (exact: the draws are not near a CDF boundary).
   Inputs come from Python's `random.Random` (Mersenne Twister, the same numbers everywhere), not
   from torch's CPU generator, whose normal sampler has ISA-specific vector paths.
2. End-to-end reproducibility: the seeded tiny run (model build, SFT cold start, GSPO steps)
   trained twice on this machine, in separate homes, gives bit-identical metrics and weights.

Regenerate the golden file on purpose (after an intended numerics change), then review the diff:

    GSPO_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden_run.py -k golden_values
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

import gspo_agents.train as train_module
from gspo_agents.config import CONFIG_DIR, register_schemas
from gspo_agents.logprobs import token_logprobs
from gspo_agents.objectives import ALGORITHMS, policy_loss
from gspo_agents.rollout.local_sampling import counter_uniforms, sample_rows

GOLDEN = Path(__file__).parent / "golden" / "numerics.json"
UPDATE_ENV = "GSPO_UPDATE_GOLDEN"
OBJECTIVE_REL_TOL, MODEL_REL_TOL, ABS_TOL = 1e-5, 1e-4, 1e-7


# --------------------------------------------------------------------------------------------
# fixed inputs (Python's RNG: identical on every machine)
# --------------------------------------------------------------------------------------------
def _uniform(rng: random.Random, shape: tuple[int, ...], lo: float, hi: float) -> torch.Tensor:
    n = math.prod(shape)
    return torch.tensor([rng.uniform(lo, hi) for _ in range(n)], dtype=torch.float32).view(shape)


def objective_inputs() -> dict[str, torch.Tensor]:
    rng = random.Random(17)
    B, T = 8, 12
    old_BT = _uniform(rng, (B, T), -3.0, -0.1)
    # current = old + a small policy change, so some sequences clip and some do not
    new_BT = old_BT + _uniform(rng, (B, T), -0.02, 0.02)
    mask_BT = torch.tensor([[float(t >= 2 + b % 3) for t in range(T)] for b in range(B)])
    adv_B = _uniform(rng, (B,), -1.5, 1.5)
    return {"new": new_BT, "old": old_BT, "mask": mask_BT, "adv": adv_B}


def objective_values() -> dict[str, dict[str, float]]:
    """loss, gradient norm and gradient sum of each algorithm on the fixed inputs."""
    inp = objective_inputs()
    out = {}
    for algorithm in ALGORITHMS:
        new_BT = inp["new"].clone().requires_grad_(True)
        loss, metrics = policy_loss(
            new_BT, inp["old"], inp["adv"], inp["mask"], algorithm=algorithm
        )
        loss.backward()
        grad = new_BT.grad.double()
        out[algorithm] = {
            "loss": loss.item(),
            "grad_norm": float(grad.norm()),
            "grad_weighted_sum": float((grad * torch.arange(grad.numel()).view_as(grad)).sum()),
            "clip_frac_tokens": float(metrics["clip_frac_tokens"]),
        }
    return out


def small_qwen3() -> torch.nn.Module:
    """A 2-layer Qwen3 whose every weight comes from Python's RNG (eager attention)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        attn_implementation="eager",
    )
    model = Qwen3ForCausalLM(config)
    rng = random.Random(3)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            scale = 1.0 if "norm" in name else 0.2
            base = 1.0 if "norm" in name else 0.0
            param.copy_(base + _uniform(rng, tuple(param.shape), -scale, scale))
    return model


def model_values() -> dict[str, float]:
    """GSPO through the model: the loss and gradient of fixed tokens against fixed old log-probs."""
    model = small_qwen3()
    rng = random.Random(5)
    ids_BT = torch.tensor([[rng.randrange(64) for _ in range(16)] for _ in range(4)])
    mask_BT = torch.zeros(4, 16)
    mask_BT[:, 6:] = 1.0
    logprobs_BT = token_logprobs(model(input_ids=ids_BT).logits, ids_BT)
    old_BT = logprobs_BT.detach() + _uniform(rng, (4, 16), -1e-4, 1e-4)  # inside the clip
    adv_B = torch.tensor([1.0, -0.5, 0.25, 0.75])  # not summing to 0: no cancelling loss
    loss, _ = policy_loss(logprobs_BT, old_BT, adv_B, mask_BT, algorithm="gspo")
    loss.backward()
    grads = [p.grad.double() for p in model.parameters() if p.grad is not None]
    return {
        "logprob_sum": float(logprobs_BT.detach().double().sum()),
        "loss": loss.item(),
        "grad_norm": float(torch.sqrt(sum((g * g).sum() for g in grads))),
    }


def sampler_values() -> dict[str, list]:
    """Exact: the uniforms as 53-bit integers, the tokens drawn from fixed logits and seeds."""
    seeds_B = torch.tensor([0, 1, 12345, 2**61 + 7])
    positions_B = torch.tensor([0, 5, 17, 1000])
    uniforms = counter_uniforms(seeds_B, positions_B)
    rng = random.Random(11)
    logits_BV = _uniform(rng, (32, 50), -4.0, 4.0)
    tokens = []
    for position in range(4):
        token_B, _ = sample_rows(
            logits_BV,
            torch.full((32,), 0.8),
            torch.arange(32) * 7919,
            torch.full((32,), position),
        )
        tokens.append(token_B.tolist())
    return {"uniforms_x2p53": [int(u * 2**53) for u in uniforms.tolist()], "tokens": tokens}


def golden_record() -> dict:
    return {
        "objectives": objective_values(),
        "model": model_values(),
        "sampler": sampler_values(),
    }


def differences(golden: dict, got: dict) -> list[str]:
    """One line per value outside its tolerance."""
    lines = []
    for algorithm, values in golden["objectives"].items():
        for key, want in values.items():
            have = got["objectives"].get(algorithm, {}).get(key)
            lines += _close(f"objectives {algorithm} {key}", want, have, OBJECTIVE_REL_TOL)
    for key, want in golden["model"].items():
        lines += _close(f"model {key}", want, got["model"].get(key), MODEL_REL_TOL)
    for key, want in golden["sampler"].items():
        if got["sampler"].get(key) != want:
            lines.append(f"sampler {key}: golden {want}, got {got['sampler'].get(key)}")
    return lines


def _close(name: str, want: float, got: float | None, rel: float) -> list[str]:
    if got is not None and math.isclose(want, got, rel_tol=rel, abs_tol=ABS_TOL):
        return []
    return [f"{name}: golden {want!r}, got {got!r} (rel tol {rel})"]


def test_golden_values_hold_on_this_cpu():
    got = golden_record()
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps({"torch": torch.__version__, **got}, indent=1) + "\n")
        pytest.skip(f"rewrote {GOLDEN}; review `git diff {GOLDEN}` and commit it")
    golden = json.loads(GOLDEN.read_text())
    diff = differences(golden, got)
    assert not diff, (
        f"numerics moved away from {GOLDEN.name}:\n  "
        + "\n  ".join(diff)
        + f"\nan intended change? regenerate with {UPDATE_ENV}=1 and review the diff"
    )


def test_comparison_names_what_moved():
    golden = golden_record()
    same = json.loads(json.dumps(golden))
    same["objectives"]["gspo"]["loss"] *= 1 + 1e-7  # summation-order noise
    assert differences(golden, same) == []
    moved = json.loads(json.dumps(golden))
    moved["objectives"]["grpo"]["grad_norm"] *= 1.01
    moved["sampler"]["tokens"][0][0] += 1
    lines = differences(golden, moved)
    assert len(lines) == 2
    assert lines[0].startswith("objectives grpo grad_norm: golden")
    assert lines[1].startswith("sampler tokens")


def test_sampled_tokens_are_not_near_a_cdf_boundary():
    """The exact token golden is sound only if a last-bit change of a probability cannot flip a
    draw: every draw's target sits at least 1e-6 (relative) away from the CDF steps around it."""
    rng = random.Random(11)
    logits_BV = _uniform(rng, (32, 50), -4.0, 4.0)
    cdf_BV = torch.softmax(logits_BV.double() / 0.8, -1).cumsum(-1)
    for position in range(4):
        u_B = counter_uniforms(torch.arange(32) * 7919, torch.full((32,), position))
        gap_BV = (cdf_BV - u_B[:, None] * cdf_BV[:, -1:]).abs()
        assert float(gap_BV.min()) > 1e-6


# --------------------------------------------------------------------------------------------
# end to end: the same seeded run twice on this machine, bit for bit
# --------------------------------------------------------------------------------------------
OVERRIDES = [
    "env=arithmetic",
    "model=tiny",
    "algorithm=gspo",
    "logger=none",
    "trainer.seed=0",
    "trainer.steps=3",
    "trainer.tasks_per_step=4",
    "rollout.num_samples_per_task=16",
    "trainer.sft.steps=30",
    "trainer.sft.batch_size=16",
    "trainer.sft.lr=2e-2",
    "algorithm.filter_zero_spread_groups=false",  # every step updates, signal or not
    # One request per forward: which requests share a batch depends on timing, and a batch's
    # composition moves logits in their last bits (the README's "runs drift apart slowly").
    "engine.max_batch_size=1",
]


TIMING = re.compile(r"_s(_|$)")  # step_time_s, rollout/engine_s_mean, ...: wall clock, not numerics


def run_seeded(run_dir: Path) -> tuple[list[str], str]:
    """Train with OVERRIDES; return the metrics rows without timings and the weights' sha256."""
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[*OVERRIDES, f"trainer.run_dir={run_dir}"])
    summary = train_module.run(cfg)
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.append(json.dumps({k: v for k, v in row.items() if not TIMING.search(k)}))
    final = run_dir / "weights" / f"step{summary['final_step']}"
    digest = hashlib.sha256()
    for shard in sorted(final.glob("*.safetensors")):
        digest.update(shard.read_bytes())
    return rows, digest.hexdigest()


@pytest.mark.slow  # two runs of SFT and three steps (the tiny model built once): ~1-2 min of CPU
@pytest.mark.timeout(1800)  # a loaded shared machine runs this several times slower
def test_two_seeded_runs_on_one_machine_are_bit_identical(tmp_path, monkeypatch):
    # Private homes: each run trains its own SFT cold start, so its reproducibility is checked
    # too (a shared cache would hand the second run the first's). The tiny model (tokenizer
    # training and a seeded init) is built by the first run and copied for the second.
    results = []
    for name in ("a", "b"):
        home = tmp_path / f"home-{name}"
        if name == "b":
            models = Path(".cache", "gspo-agents", "models")
            shutil.copytree(tmp_path / "home-a" / models, home / models)
        monkeypatch.setenv("HOME", str(home))
        results.append(run_seeded(tmp_path / f"run-{name}"))
    (rows_a, weights_a), (rows_b, weights_b) = results
    assert len(rows_a) == 3
    assert any(json.loads(r)["grad_norm"] > 0 for r in rows_a)  # the runs did update the model
    for step, (a, b) in enumerate(zip(rows_a, rows_b), start=1):
        assert a == b, f"step {step} differs between two identical runs:\n{a}\n{b}"
    assert weights_a == weights_b
