"""Cold-start SFT: length bucketing changes the cost of a step, never its gradient."""

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from gspo_agents.models import ModelConfig, resolve_model
from gspo_agents.sft import _accumulate_token_mean_loss, _batch, length_buckets


def _examples(seed: int, n: int, vocab: int):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = [rng.randrange(4, vocab) for _ in range(rng.randint(5, 60))]
        answer = [rng.randrange(4, vocab) for _ in range(rng.randint(1, 120))]
        out.append((prompt, answer))
    return out


def test_length_buckets_keep_every_example_within_the_padded_token_budget():
    examples = _examples(0, 40, 100)
    buckets = length_buckets(examples, max_padded_tokens=600)
    assert sorted(map(id, sum(buckets, []))) == sorted(map(id, examples))
    assert len(buckets) > 1
    for bucket in buckets:
        longest = max(len(p) + len(a) for p, a in bucket)
        # a single example longer than the budget still gets its own bucket
        assert len(bucket) * longest <= 600 or len(bucket) == 1


def test_bucketed_gradient_equals_one_padded_batch():
    model_dir = resolve_model(ModelConfig(name="tiny"))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    pad_id = model.config.pad_token_id or 0
    batch = _examples(1, 12, model.config.vocab_size)

    model.zero_grad()
    ids, labels, attention = _batch(batch, pad_id)
    reference = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    reference.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    import gspo_agents.sft as sft

    original = sft.MICRO_BATCH_TOKENS
    sft.MICRO_BATCH_TOKENS = 300  # forces several buckets
    try:
        assert len(length_buckets(batch, 300)) > 2
        loss = _accumulate_token_mean_loss(model, batch, pad_id)
    finally:
        sft.MICRO_BATCH_TOKENS = original
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_an_env_without_reference_responses_starts_from_the_base_model_with_a_note(capsys):
    """reference_response is optional: no cold start (and nothing cached), one note naming the
    choices, and RL starts from the base model."""
    from hydra import compose, initialize_config_dir

    from envs.base import TextEnv
    from gspo_agents.components import base_model_dir, resolve_start_model
    from gspo_agents.config import CONFIG_DIR, register_schemas

    class NoReference(TextEnv):
        def load_tasks(self, split):
            return [{"id": "a", "word": "apple"}]

        def initial_messages(self, task):
            return [{"role": "user", "content": "Say apple."}]

    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=["env.name=test/NoReference-v0"])
    model_dir = resolve_start_model(cfg, NoReference())
    assert model_dir == base_model_dir(cfg)
    err = capsys.readouterr().err
    assert "note: NoReference gives no reference_response, so there is no cold start" in err
    assert "trainer.sft.enabled=false" in err
    # no announcement of an SFT stage that then does not happen (issue 35)
    assert "cold start: SFT on" not in err


def test_the_console_line_names_the_longest_whole_turn():
    from gspo_agents.sft import describe_examples

    line = describe_examples([([1] * 600, [2] * 31), ([1] * 900, [2] * 572)], num_tasks=1)
    assert line == (
        "cold start: 2 examples from 1 tasks, whole turns (the longest 572 tokens, prompt and "
        "turn up to 1472 tokens)"
    )
