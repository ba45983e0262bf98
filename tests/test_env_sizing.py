"""Env classes declare their own sizing and sandbox needs; the trainer reads them from the class.

A real Gymnasium registration of a custom env, composed through the real config.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from hydra import compose, initialize_config_dir

from envs.arithmetic import ArithmeticEnv
from gspo_agents.config import CONFIG_DIR, ConfigError, register_schemas
from gspo_agents.env_sizing import apply_env_sizing, explicit_keys, needs_sandbox


class SizedEnv(ArithmeticEnv):
    default_sizing = {"rollout.max_new_tokens_per_turn": 64, "trainer.steps": 7}


class CodeRunningEnv(ArithmeticEnv):
    needs_sandbox = True


class BadlySizedEnv(ArithmeticEnv):
    default_sizing = {"max_new_tokens": 64}


def setup_module():
    for env_id, cls in (
        ("sizing/Sized-v0", SizedEnv),
        ("sizing/CodeRunning-v0", CodeRunningEnv),
        ("sizing/Bad-v0", BadlySizedEnv),
    ):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=cls)


def config(*overrides: str):
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def test_declared_sizing_applies_unless_given_explicitly():
    overrides = ["env.name=sizing/Sized-v0", "trainer.steps=3"]
    cfg = apply_env_sizing(config(*overrides), explicit_keys(overrides))
    assert cfg.rollout.max_new_tokens_per_turn == 64  # declared by the class
    assert cfg.trainer.steps == 3  # given on the command line: wins
    assert cfg.rollout.max_context_tokens == 128  # not declared: the env group's


def test_an_env_that_declares_nothing_is_told_what_it_inherits(capsys):
    cfg = config("env.name=sizing/CodeRunning-v0")
    assert apply_env_sizing(cfg, set()) is cfg
    assert "CodeRunningEnv declares no default_sizing" in capsys.readouterr().err


def test_unknown_sizing_keys_are_named():
    with pytest.raises(ConfigError, match="max_new_tokens"):
        apply_env_sizing(config("env.name=sizing/Bad-v0"), set())


def test_the_sandbox_follows_the_class_not_the_name():
    assert needs_sandbox("sizing/CodeRunning-v0")
    assert not needs_sandbox("sizing/Sized-v0")
    assert needs_sandbox("codeforces") and not needs_sandbox("arithmetic")


def test_a_custom_env_gets_a_context_that_fits_its_prompts(capsys):
    from gspo_agents.env_sizing import PromptLengths, fit_to_prompts

    cfg = config("env.name=sizing/CodeRunning-v0")
    fitted = fit_to_prompts(cfg, PromptLengths(prompt=490, reference=76, turns=3), set())
    # 96 new tokens (76 + 8, rounded up to 16); 490 + 5 x 96 = 970, rounded up to 64
    assert fitted.rollout.max_new_tokens_per_turn == 96
    assert fitted.rollout.max_context_tokens == 1024
    err = capsys.readouterr().err
    assert (
        "prompts are up to 490 tokens" in err and "rollout.max_context_tokens=1024 (was 128)" in err
    )


def test_a_context_given_explicitly_is_kept_or_rejected_in_one_line_naming_the_fix():
    from gspo_agents.env_sizing import PromptLengths, fit_to_prompts

    overrides = ["env.name=sizing/CodeRunning-v0", "rollout.max_context_tokens=256"]
    cfg = config(*overrides)
    long = PromptLengths(prompt=300, reference=10, turns=1)
    with pytest.raises(ConfigError) as err:
        fit_to_prompts(cfg, long, explicit_keys(overrides))
    assert str(err.value) == (
        "rollout.max_context_tokens=256 leaves no room to generate: the longest prompt of "
        "sizing/CodeRunning-v0 is 300 tokens; set rollout.max_context_tokens=384 (at least 332)"
    )
    fits = PromptLengths(prompt=100, reference=10, turns=1)
    assert fit_to_prompts(cfg, fits, explicit_keys(overrides)).rollout.max_context_tokens == 256


def test_a_built_in_env_keeps_its_groups_sizing_and_is_told_when_references_do_not_fit(capsys):
    from gspo_agents.env_sizing import PromptLengths, fit_to_prompts

    fitted = fit_to_prompts(config(), PromptLengths(prompt=30, reference=40, turns=1), set())
    assert fitted.rollout.max_new_tokens_per_turn == 16  # configs/env/arithmetic.yaml's choice
    err = capsys.readouterr().err
    assert "reference turns are up to 40 tokens" in err
    assert "rollout.max_new_tokens_per_turn=16" in err and "=48 to let it" in err
    fit_to_prompts(config(), PromptLengths(prompt=30, reference=15, turns=1), set())
    assert "reference turns" not in capsys.readouterr().err  # 15 + the end-of-turn token fit
