"""Log-probs and entropies from hidden states, chunked: equal to the full-logits path, values and
gradients, fp32 and bf16, tied and untied embeddings, dense and MoE, with prefix sharing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from gspo_agents.learner.head import TokenHead
from gspo_agents.learner.prefix import shared_prefix_stats
from gspo_agents.logprobs import hidden_token_stats, token_entropy, token_logprobs

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from test_learner_prefix import grouped_batch  # noqa: E402
from tiny import build_tiny_model, synthetic_batch  # noqa: E402

# relative to the largest element: fp32 rounding, or one bf16 rounding step (2^-8) either way
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _close(a: torch.Tensor, b: torch.Tensor, tol: float, what: str) -> None:
    scale = b.abs().max().clamp(min=1e-12)
    assert (a - b).abs().max() <= tol * scale, f"{what}: {(a - b).abs().max()} vs {scale}"


def _full(h, w, b, ids, temperature, scale):
    logits = F.linear(h, w, b) * scale
    return token_logprobs(logits, ids, temperature), token_entropy(logits, temperature)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1, 5, 64])  # one position, not dividing B x T, one chunk
def test_chunked_stats_equal_full_logits_values_and_gradients(dtype, chunk):
    g = torch.Generator().manual_seed(0)
    B, T, H, V = 3, 9, 16, 40
    h = torch.randn(B, T, H, generator=g).requires_grad_(True)
    w = (0.5 * torch.randn(V, H, generator=g)).requires_grad_(True)
    b = torch.randn(V, generator=g).requires_grad_(True)
    ids = torch.randint(0, V, (B, T), generator=g)
    g_lp, g_ent = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    results = []
    for fn in (_full, None):
        for t in (h, w, b):
            t.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            if fn is None:
                lp, ent = hidden_token_stats(h, w, ids, 0.7, chunk, bias_V=b, scale=1.3)
            else:
                lp, ent = fn(h, w, b, ids, 0.7, 1.3)
        ((lp * g_lp).sum() + (ent * g_ent).sum()).backward()
        results.append([lp.detach(), ent.detach(), h.grad, w.grad, b.grad])
    assert results[1][0][:, 0].eq(0).all() and results[1][1][:, 0].eq(0).all()
    for name, new, old in zip(["lp", "entropy", "hidden", "weight", "bias"], *results, strict=True):
        _close(new, old, TOL[dtype], name)
    assert results[1][2].dtype == h.dtype and results[1][3].dtype == w.dtype


def test_entropy_is_the_sampling_distributions():
    log8 = float(torch.log(torch.tensor(8.0)))
    h, w = torch.eye(8)[:2][None], torch.eye(8)
    uniform = hidden_token_stats(0 * h, w, torch.zeros(1, 2, dtype=torch.long), 0.5, 4)[1]
    assert uniform[0, 1] == pytest.approx(log8, abs=1e-5)  # uniform at any temperature
    peaked = hidden_token_stats(10 * h, w, torch.zeros(1, 2, dtype=torch.long), 1.0, 4)[1]
    flatter = hidden_token_stats(10 * h, w, torch.zeros(1, 2, dtype=torch.long), 5.0, 4)[1]
    assert 0 < peaked[0, 1] < flatter[0, 1] < float(torch.log(torch.tensor(8.0)))


def test_bad_chunk_size_is_rejected():
    with pytest.raises(ValueError, match="chunk_tokens"):
        hidden_token_stats(torch.zeros(1, 2, 4), torch.zeros(3, 4), torch.zeros(1, 2).long(), 1, 0)


# --------------------------------------------------------------------------------------------
# on real models
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("head")
    return {
        "tied": build_tiny_model(root / "tied"),
        "untied": build_tiny_model(root / "untied", tie=False),
        "moe": build_tiny_model(root / "moe", moe=True),
    }


def _model_stats_and_grads(model, head: TokenHead | None, batch, bf16: bool):
    model.zero_grad()
    ids, attn = batch.input_ids_BT, batch.attention_mask_BT
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if head is None:  # today's path: full logits
            logits = model(input_ids=ids, attention_mask=attn).logits
            lp, ent = token_logprobs(logits, ids, 0.8), token_entropy(logits, 0.8)
        else:
            lp, ent = head(ids, attention_mask=attn)
    mask = batch.loss_mask_BT
    ((lp * batch.advantages_BT).sum() + (ent * mask).sum() * 0.1).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach() * mask, ent.detach() * mask, grads


@pytest.mark.parametrize("kind", ["tied", "untied", "moe"])
@pytest.mark.parametrize("bf16", [False, True])
def test_token_head_equals_the_full_logits_forward(models, kind, bf16):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models[kind], dtype=torch.float32)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == (kind != "untied")
    batch = synthetic_batch(7)
    head = TokenHead(model, 0.8, chunk_tokens=13)
    assert head.chunked
    old = _model_stats_and_grads(model, None, batch, bf16)
    new = _model_stats_and_grads(model, head, batch, bf16)
    tol = TOL[torch.bfloat16 if bf16 else torch.float32]
    _close(new[0], old[0], tol, "logprobs")
    _close(new[1], old[1], tol, "entropy")
    out_weight = "model.embed_tokens.weight" if kind != "untied" else "lm_head.weight"
    assert old[2].keys() == new[2].keys() and out_weight in new[2]
    for name in old[2]:
        _close(new[2][name], old[2][name], 5 * tol if bf16 else tol, name)


def test_prefix_sharing_with_the_chunked_head_equals_the_full_logits_forward(models):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["untied"], dtype=torch.float32)
    batch = grouped_batch(2)
    old = _model_stats_and_grads(model, None, batch, False)
    model.zero_grad()
    lp, ent = shared_prefix_stats(
        TokenHead(model, 0.8, chunk_tokens=7), batch.input_ids_BT, batch.attention_mask_BT
    )
    mask = batch.loss_mask_BT
    ((lp * batch.advantages_BT).sum() + (ent * mask).sum() * 0.1).backward()
    _close(lp.detach() * mask, old[0], 1e-5, "logprobs")
    _close(ent.detach() * mask, old[1], 1e-5, "entropy")
    for name, p in model.named_parameters():
        _close(p.grad, old[2][name], 1e-5, name)


def test_full_logits_fallback_for_soft_capped_models(models, caplog):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["tied"], dtype=torch.float32)
    model.config.final_logit_softcapping = 30.0  # as Gemma-2 declares it
    head = TokenHead(model, 1.0, chunk_tokens=16)
    assert not head.chunked and "soft-caps" in caplog.text
    batch = synthetic_batch(1)
    lp, ent = head(batch.input_ids_BT, attention_mask=batch.attention_mask_BT)
    logits = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
    mask = batch.attention_mask_BT.bool()
    _close(lp[mask], token_logprobs(logits, batch.input_ids_BT)[mask], 1e-6, "logprobs")
    _close(ent[mask], token_entropy(logits)[mask], 1e-5, "entropy")
