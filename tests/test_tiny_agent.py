"""The tiny-agent model's tokenizer: trained on tool-calling text as well, it renders a tool prompt
in far fewer tokens than the tiny tokenizer, and the tiny recipe itself is untouched."""

from __future__ import annotations

from gspo_agents import models
from gspo_agents.models import (
    _recipe,
    _train_tokenizer,
    build_agent_corpus,
    build_corpus,
    load_tokenizer,
)


def test_agent_corpus_is_deterministic_and_renders_tool_calls():
    corpus = build_agent_corpus(num_lines=20)
    assert corpus == build_agent_corpus(num_lines=20)
    assert "<tools>" in corpus and "<tool_call>" in corpus and "<tool_response>" in corpus


def test_tiny_agent_tokenizer_halves_a_tool_prompt(tmp_path):
    import envs

    base, agent = tmp_path / "tiny", tmp_path / "agent"
    _train_tokenizer(build_corpus(), base)
    _train_tokenizer(build_corpus() + "\n" + build_agent_corpus(), agent)
    env = envs.make("codeagent")  # all six tools
    task = env.load_tasks("train")[0]
    messages, _ = env.reset(options={"task": task})
    lengths = {}
    for name, path in (("tiny", base), ("agent", agent)):
        tok = load_tokenizer(str(path))
        text = tok.apply_chat_template(
            messages, tools=env.tool_schemas(), tokenize=False, add_generation_prompt=True
        )
        lengths[name] = len(tok.encode(text, add_special_tokens=False))
    assert lengths["agent"] < 0.6 * lengths["tiny"], lengths


def test_tiny_recipe_does_not_change():
    assert "corpus" not in _recipe("tiny") and _recipe("tiny-agent")["corpus"] == "agent"
    assert _recipe("tiny")["arch"] == _recipe("tiny-agent")["arch"]
    assert models.CHAT_TEMPLATE == _recipe("tiny")["chat_template"]
