"""Engine-side routing replay (`routing_replay_source=engine`): the learner replays the routes
the ENGINE reported (the ones behind pi_old), per row and at every optimizer step; the trainer's
own routes only at each row's last position, which no engine forward took as input.

The expected log-probs come from this file's own forward of a fresh copy of the model with the
engine's experts forced into each router by hand (Qwen3-MoE's router semantics: the chosen
experts' softmax probabilities, renormalised), never from the learner's replay code.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gspo_agents.learner import BatchError, Learner, LearnerConfig
from gspo_agents.models import load_model

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from tiny import synthetic_batch, with_old_logprobs  # noqa: E402

CFG = LearnerConfig(
    algorithm="gspo",
    lr=5e-2,
    num_minibatches=1,
    micro_batch_tokens=4096,
    routing_replay=True,
    routing_replay_source="engine",
)


def _random_routes(lengths: list[int], layers: int, experts: int, k: int, seed: int):
    """Per row, [length - 1, layers*k]: a random k-subset of experts per (position, layer) —
    not what the model's routers would choose."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.rand(n - 1, layers, experts, generator=g).argsort(dim=-1)[..., :k]
        out.append(ids.reshape(n - 1, layers * k).to(torch.int32))
    return out


def _forced_logprobs(model_dir: str, tokens: list[int], forced: torch.Tensor | None):
    """log p(token t | tokens before t) for t >= 1, with the routers' experts at positions
    [0, len(forced)) forced to `forced` ([positions, layers*k]); the router's own top-k at the
    rest (and everywhere when forced is None)."""
    model = load_model(model_dir, "float32").eval()
    cfg = model.config
    k = cfg.num_experts_per_tok

    def hook_for(layer: int):
        def hook(module, inputs, output):
            logits = output[0]
            probs = torch.softmax(logits.float(), dim=-1)
            ids = probs.topk(k, dim=-1).indices
            if forced is not None:
                n = forced.shape[0]
                ids = ids.clone()
                ids[:n] = forced.reshape(n, -1, k)[:, layer].long()
            weights = probs.gather(-1, ids)
            weights = weights / weights.sum(dim=-1, keepdim=True)
            return logits, weights.to(logits.dtype), ids

        return hook

    handles = [
        layer.mlp.gate.register_forward_hook(hook_for(i))
        for i, layer in enumerate(model.model.layers)
    ]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    for h in handles:
        h.remove()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(tokens[1:])[:, None])
    return torch.cat([torch.zeros(1), lp[:, 0]])


def _engine_batch(moe_dir: str, seed: int = 5):
    """A batch whose engine routes are random, with engine log-probs computed under them."""
    batch = synthetic_batch(seed, batch_size=6)
    cfg = load_model(moe_dir, "float32").config
    lengths = batch.attention_mask_BT.sum(dim=1).tolist()
    routes = _random_routes(
        lengths, cfg.num_hidden_layers, cfg.num_experts, cfg.num_experts_per_tok, seed
    )
    old = torch.zeros_like(batch.old_logprobs_BT)
    natural = torch.zeros_like(old)
    for r, n in enumerate(lengths):
        tokens = batch.input_ids_BT[r, :n].tolist()
        old[r, :n] = _forced_logprobs(moe_dir, tokens, routes[r])
        natural[r, :n] = _forced_logprobs(moe_dir, tokens, None)
    batch = replace(with_old_logprobs(batch, old), engine_routes=routes)
    return batch, natural * batch.loss_mask_BT


def test_engine_routes_make_the_first_ratio_exactly_one(moe_dir):
    """pi_old = the engine's log-probs under ITS routes: replaying those routes gives ratio 1 at
    every sequence before the step (loss = -mean advantage); replaying the trainer's does not."""
    batch, natural = _engine_batch(moe_dir)
    mask = batch.loss_mask_BT.bool()
    # meaningful: the engine's routes change the log-probs by far more than GSPO's clip band
    assert (natural - batch.old_logprobs_BT)[mask].abs().max() > 1e-2
    learner = Learner(moe_dir, CFG)
    metrics = learner.update(batch)
    learner.close()
    advantage = [float(batch.advantages_BT[r][mask[r]][0]) for r in range(batch.num_sequences)]
    assert metrics["ratio_min"] == pytest.approx(1.0, abs=2e-5)
    assert metrics["ratio_max"] == pytest.approx(1.0, abs=2e-5)
    assert metrics["loss"] == pytest.approx(-sum(advantage) / len(advantage), abs=1e-5)
    # the trainer's routes on the same batch: the ratio moves off 1 and the tight band clips
    trainer = Learner(moe_dir, replace(CFG, routing_replay_source="trainer"))
    other = trainer.update(batch)
    trainer.close()
    assert other["ratio_max"] - other["ratio_min"] > 1e-3
    assert other["clip_frac_seqs_first_mb"] > 0.0


def test_each_row_replays_its_own_engine_routes_at_every_step(moe_dir):
    batch, _ = _engine_batch(moe_dir, seed=9)
    learner = Learner(moe_dir, replace(CFG, num_minibatches=2, micro_batch_tokens=64))
    k = learner._routers.top_k
    lengths = batch.attention_mask_BT.sum(dim=1).tolist()
    row_of = {tuple(batch.input_ids_BT[r, : lengths[r]].tolist()): r for r in range(6)}
    seen: list[tuple[int, torch.Tensor]] = []

    def spy(module, args, kwargs):  # every forward of the decoder stack, whoever calls it
        replay = learner._routers._replay_LNK
        ids = kwargs.get("input_ids", args[0] if args else None)
        if replay is None or ids is None:
            return
        T = ids.shape[1]
        for i in range(ids.shape[0]):
            key = tuple(ids[i].tolist())
            r = next((row_of[key[:n]] for n in lengths if key[:n] in row_of), None)
            if r is not None and lengths[r] <= T and all(x == 0 for x in key[lengths[r] :]):
                seen.append((r, replay[:, i * T : i * T + lengths[r]].clone()))

    handle = learner.model.model.register_forward_pre_hook(spy, with_kwargs=True)
    learner.update(batch)
    handle.remove()
    learner.close()
    assert {r for r, _ in seen} == set(range(6))  # every row trained, both steps
    for r, replayed_LNK in seen:
        n = lengths[r] - 1
        engine_LNK = batch.engine_routes[r].reshape(n, -1, k).permute(1, 0, 2).long()
        torch.testing.assert_close(
            replayed_LNK[:, :n], engine_LNK.sort(dim=-1).values, rtol=0, atol=0
        )


def test_engine_replay_without_engine_routes_is_a_clear_batch_error(moe_dir):
    batch = synthetic_batch(3, batch_size=4)
    learner = Learner(moe_dir, CFG)
    with pytest.raises(BatchError, match="carries no engine routes"):
        learner.update(batch)
    learner.close()


def test_an_unknown_replay_source_names_the_choices():
    with pytest.raises(ValueError, match="trainer, engine"):
        replace(CFG, routing_replay_source="engin")
