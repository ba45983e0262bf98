"""Cold-start references are taught in the model's tool-call format (`rollout.tool_format`).

The tool envs write their reference turns with Hermes calls; `references_in_format` rewrites them
in the resolved format, and each rendered turn must parse back, with that format's parser and
the env's tool schemas, to exactly the calls (and prose) the Hermes turn held.
"""

from __future__ import annotations

import pytest

import envs
from envs.registry import BUILTIN_ENVS
from envs.tools import ToolEnv, tool
from envs.tools.parsers import get_parser, parse_hermes, parser_names, run_parser
from envs.tools.trajectory import in_tool_format, references_in_format, tool_call, turn

# every built-in tool env with its own reference_response, built as its references need
TOOL_ENVS = {
    "gspo/CodeAgent-v0": [{"max_turns": 6}, {"tools": ["bash", "str_replace", "submit"]}],
    "gspo/SWE-v0": [{"max_turns": 8}, {"max_turns": 3}],
    "gspo/MathTool-v1": [{}],
}
SAMPLE_TASKS = 6


def test_every_builtin_tool_env_with_references_is_covered():
    own = set()
    for env_id in BUILTIN_ENVS:
        cls = envs.env_class(env_id)
        if issubclass(cls, ToolEnv) and cls.reference_response is not ToolEnv.reference_response:
            own.add(env_id)
    assert own == set(TOOL_ENVS)


@pytest.mark.parametrize("tool_format", parser_names())
@pytest.mark.parametrize(
    ("env_id", "kwargs"), [(e, k) for e, ks in TOOL_ENVS.items() for k in ks], ids=str
)
def test_rendered_references_parse_back_with_the_chosen_parser(env_id, kwargs, tool_format):
    env = envs.make(env_id, **kwargs).unwrapped
    parse, schemas = get_parser(tool_format), env.tool_schemas()
    seen_calls = 0
    for task in env.load_tasks("train")[:SAMPLE_TASKS]:
        reference = env.reference_response(task)
        turns = [reference] if isinstance(reference, str) else list(reference or [])
        rendered = references_in_format(reference, tool_format)
        rendered = [rendered] if isinstance(rendered, str) else list(rendered or [])
        assert len(rendered) == len(turns)
        for hermes_text, text in zip(turns, rendered):
            want = parse_hermes(hermes_text)
            got = run_parser(parse, text, schemas)
            assert got.items == want.calls, text  # every call, none of them an error
            assert got.content == want.content
            seen_calls += len(want.calls)
            if tool_format != "hermes" and want.calls:
                assert parse_hermes(text).calls == []  # truly in the other format
    if env_id != "gspo/MathTool-v1":  # its reference is the final answer alone
        assert seen_calls > 0


def test_a_turn_in_qwen3_coder_keeps_its_prose_and_typed_arguments():
    text = turn("Look.", [tool_call("view", path="a.py", view_range=[3, 9]), tool_call("submit")])
    out = in_tool_format(text, "qwen3_coder")
    assert out.startswith("Look.\n<tool_call>\n<function=view>\n<parameter=path>\na.py\n")
    assert "<parameter=view_range>\n[3, 9]\n</parameter>" in out
    assert in_tool_format("The answer is 4.", "qwen3_coder") == "The answer is 4."
    assert in_tool_format(out, "qwen3_coder") == out  # already converted: left alone
    with pytest.raises(ValueError, match="do not parse"):
        in_tool_format(text + "\n<tool_call>\n{not json}\n</tool_call>", "qwen3_coder")


@pytest.mark.slow  # loads a tokenizer and steps the env: ~8 s on a loaded 2-core machine
def test_the_cold_start_teaches_and_steps_the_env_in_qwen3_coder(tmp_path, monkeypatch):
    """The recipe env (envs/README_custom_env.md) under qwen3_coder: the call example is XML,
    and the env, parsing XML, ran the tool (its result is in the next example's prompt)."""
    from test_custom_tool_env_recipe import install_recipe

    from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model
    from gspo_agents.sft import build_examples, cache_key, reference_format

    install_recipe(tmp_path, monkeypatch)
    try:
        env = envs.make("myenv/Units-v0")
        env.unwrapped.use_tool_format("qwen3_coder")
        assert reference_format(env) == "qwen3_coder"
        model_dir = resolve_model(ModelConfig(name="tiny-agent"))
        tokenizer = load_tokenizer(model_dir)
        tasks = env.load_tasks("train")[:1]
        (call_prompt, call), (answer_prompt, _) = build_examples(env, tokenizer, tasks, 1)
        written = tokenizer.decode(call, skip_special_tokens=True)
        assert "<function=convert>" in written and '"arguments"' not in written
        later = tokenizer.decode(answer_prompt[len(call_prompt) :])
        assert "<tool_response>\n3000\n</tool_response>" in later
        # a cached Hermes cold start is never reused for another format
        args = (model_dir, "myenv/Units-v0", {}, {"steps": 1}, 0)
        assert cache_key(*args) != cache_key(*args, "qwen3_coder")
    finally:
        import gymnasium as gym

        gym.registry.pop("myenv/Units-v0", None)


@pytest.mark.slow  # composes the config and loads the tiny model's tokenizer: ~10 s here
def test_the_train_cold_start_gives_the_env_the_resolved_tool_format():
    """resolve_start_model (train's cold start) sets rollout.tool_format on the env before it
    asks for references; an explicit env.kwargs.tool_parser is left as the user chose."""
    from hydra import compose, initialize_config_dir

    from gspo_agents.components import resolve_start_model
    from gspo_agents.config import CONFIG_DIR, register_schemas

    class NoReferenceTools(ToolEnv):  # no references: the cold start stops after the format
        def load_tasks(self, split):
            return [{"id": "a"}]

        def initial_messages(self, task):
            return [{"role": "user", "content": "hi"}]

        @tool
        def noop(self) -> str:
            """Does nothing."""
            return ""

    register_schemas()
    for overrides, want in (
        (["rollout.tool_format=qwen3_coder"], "qwen3_coder"),
        (["rollout.tool_format=qwen3_coder", "+env.kwargs.tool_parser=hermes"], "hermes"),
        ([], "hermes"),  # auto on the tiny model's Hermes template: the env's own default
    ):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            cfg = compose(config_name="config", overrides=["env.name=test/T-v0", *overrides])
        env = NoReferenceTools()
        resolve_start_model(cfg, env)
        assert env.tool_parser == want, overrides
