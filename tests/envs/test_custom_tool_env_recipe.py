"""The custom tool-env recipe of envs/README_custom_env.md runs as written, in under 50 lines."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from pathlib import Path

import gymnasium as gym

import envs

DOC = Path(__file__).resolve().parents[2] / "envs" / "README_custom_env.md"


def _recipe() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    (block,) = [b for b in blocks if "ToolEnv" in b]
    return block


def install_recipe(tmp_path, monkeypatch) -> None:
    """The recipe as a user's package `my_envs` on sys.path, imported fresh and registered."""
    package = tmp_path / "my_envs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "units.py").write_text(_recipe())
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "my_envs" or m.startswith("my_envs.")]:
        monkeypatch.delitem(sys.modules, name)
    importlib.import_module("my_envs.units").register()


def test_recipe_is_under_50_lines():
    assert len(_recipe().strip().splitlines()) < 50


def test_recipe_registers_renders_and_plays_an_episode(tmp_path, monkeypatch):
    install_recipe(tmp_path, monkeypatch)
    try:
        env = envs.make("myenv/Units-v0")
        schema = env.tool_schemas()[0]["function"]
        assert schema["name"] == "convert" and schema["parameters"]["required"] == [
            "value",
            "src",
            "dst",
        ]
        assert schema["parameters"]["properties"]["value"]["type"] == "number"
        task = env.load_tasks("train")[0]  # 3 km -> m

        async def episode():
            messages, _ = await env.areset(options={"task": task})
            assert messages[0]["content"] == "How many m is 3 km?"
            call, answer = env.reference_response(task)  # the cold start's two turns
            assert answer == "3000"
            obs, reward, term, trunc, _ = await env.astep(call)
            assert obs == [{"role": "tool", "content": "3000"}] and not term
            bad = '<tool_call>\n{"name": "convert", "arguments": {"value": 3, "src": "yd", "dst": "m"}}\n</tool_call>'
            obs, *_ = await env.astep(bad)
            assert obs[0]["content"].startswith("Error: units are m, km")
            obs, reward, term, trunc, info = await env.astep(" 3000\n")
            assert (reward, term, info["env_metrics"]["tool_errors"]) == (1.0, True, 1.0)
            await env.aclose()

        async def final(text: str) -> float:  # one answer after a fresh reset
            await env.areset(options={"task": task})
            return (await env.astep(text))[1]

        asyncio.run(episode())
        # exact: the number alone; a wrong number that contains the right digits scores 0
        for wrong in ("30000", "300", "3000 or 30000", "That is 3000 m.", "", "3e3x"):
            assert asyncio.run(final(wrong)) == 0.0, wrong
        assert asyncio.run(final("3000.0")) == 1.0
        cm = env.load_tasks("train")[1]  # 250 cm -> 2.5 m: "12.5" holds "2.5" but is wrong
        for text, want in (("12.5", 0.0), ("2.5", 1.0)):

            async def one(text=text):
                await env.areset(options={"task": cm})
                return (await env.astep(text))[1]

            assert asyncio.run(one()) == want, text
    finally:
        gym.registry.pop("myenv/Units-v0", None)


def test_the_cold_start_trains_on_both_turns_of_the_reference(tmp_path, monkeypatch):
    """A reference given as turns: the env is stepped with the call, and the answer's example is
    prompted with the conversation so far (the tool's result in it), as a rollout renders it."""
    from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model
    from gspo_agents.sft import build_examples

    install_recipe(tmp_path, monkeypatch)
    try:
        env = envs.make("myenv/Units-v0")
        tokenizer = load_tokenizer(resolve_model(ModelConfig(name="tiny-agent")))
        tasks = env.load_tasks("train")
        examples = build_examples(env, tokenizer, tasks, max_examples=len(tasks))
        assert len(examples) == 2 * len(tasks)
        (call_prompt, call), (answer_prompt, answer) = examples[:2]
        assert answer_prompt[: len(call_prompt)] == call_prompt  # the same conversation, longer
        later = tokenizer.decode(answer_prompt[len(call_prompt) :])
        assert '"convert"' in later and "<tool_response>\n3000\n</tool_response>" in later
        assert tokenizer.decode(answer, skip_special_tokens=True) == "3000"
    finally:
        gym.registry.pop("myenv/Units-v0", None)
