"""The tiny models are built locally, cached by recipe hash, and load through from_pretrained."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from gspo_agents.models import (
    IM_END,
    PAD_TOKEN,
    ModelConfig,
    ModelConfigError,
    build_corpus,
    load_model,
    load_tokenizer,
    num_parameters,
    resolve_model,
)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def tiny_dir(cache_dir) -> str:
    return resolve_model(ModelConfig(name="tiny", cache_dir=cache_dir))


def test_tiny_is_a_small_qwen3_loaded_through_from_pretrained(tiny_dir):
    model = load_model(tiny_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert 500_000 < num_parameters(model) < 3_000_000
    assert model.config.tie_word_embeddings
    assert next(model.parameters()).dtype == torch.float32
    assert not model.training


def test_tiny_moe_is_a_qwen3_moe_with_top2_of_8(cache_dir):
    path = resolve_model(ModelConfig(name="tiny-moe", cache_dir=cache_dir))
    model = load_model(path)
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert (model.config.num_experts, model.config.num_experts_per_tok) == (8, 2)
    out = model(torch.tensor([[1, 5, 9, 2]]))
    assert out.logits.shape == (1, 4, model.config.vocab_size)


def test_tokenizer_has_qwen_special_tokens_and_vocab_matches_model(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    model = load_model(tiny_dir)
    assert tok.eos_token == IM_END and tok.pad_token == PAD_TOKEN
    assert model.config.eos_token_id == tok.eos_token_id
    assert model.config.vocab_size == len(tok)
    assert 1000 <= len(tok) <= 2048


def test_chat_template_opens_an_assistant_turn_on_request(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    with_prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    without = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert without == "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
    assert with_prompt == without + "<|im_start|>assistant\n"
    ids = tok(with_prompt)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 2


@pytest.mark.parametrize(
    "text",
    [
        "What is 123 * 45? The answer is \\boxed{5535}.",
        "def solve():\n    n = int(input())\n    print(n * 2)\n",
        "#include <bits/stdc++.h>\nint main() { std::cout << 42 << std::endl; }\n",
        "Unseen wörds ünïcode ✓ survive byte-level BPE",
    ],
)
def test_tokenizer_round_trips_text(tiny_dir, text):
    tok = load_tokenizer(tiny_dir)
    assert tok.decode(tok(text)["input_ids"]) == text


def test_digits_are_single_tokens(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    pieces = tok.convert_ids_to_tokens(tok("x=90817")["input_ids"])
    assert pieces[-5:] == ["9", "0", "8", "1", "7"]


def test_second_resolve_is_a_cache_hit(cache_dir, tiny_dir):
    stamp = os.path.getmtime(Path(tiny_dir) / "model.safetensors")
    again = resolve_model(ModelConfig(name="tiny", cache_dir=cache_dir))
    assert again == tiny_dir
    assert os.path.getmtime(Path(again) / "model.safetensors") == stamp
    assert not [p for p in Path(cache_dir).iterdir() if p.name.startswith(".")]  # no temp left


def test_builds_are_deterministic(tmp_path, tiny_dir):
    other = resolve_model(ModelConfig(name="tiny", cache_dir=str(tmp_path)))
    assert Path(other).name == Path(tiny_dir).name
    a, b = load_model(tiny_dir), load_model(other)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name
    assert build_corpus() == build_corpus()


def test_hf_name_accepts_any_checkpoint_directory(tiny_dir):
    assert resolve_model(ModelConfig(name="hf", path=tiny_dir)) == str(Path(tiny_dir).resolve())


def test_hf_without_path_or_with_bad_path_fails_clearly(tmp_path):
    with pytest.raises(ModelConfigError, match="model.path"):
        resolve_model(ModelConfig(name="hf"))
    with pytest.raises(ModelConfigError, match="no config.json"):
        resolve_model(ModelConfig(name="hf", path=str(tmp_path / "missing")))


def test_bad_names_fail_with_the_valid_choices():
    with pytest.raises(ModelConfigError, match="tiny-moe"):
        ModelConfig(name="tiny_moe")  # type: ignore[arg-type]
    with pytest.raises(ModelConfigError, match="bfloat16"):
        ModelConfig(dtype="fp8")


def test_bf16_load(tiny_dir):
    model = load_model(tiny_dir, "bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
