"""What an env class declares about itself, applied to the run: its sizing and its sandbox.

The built-in envs' sizing lives in their config group (configs/env/*.yaml). A custom env selected
by `env.name=myenv/Echo-v0` keeps the default group's sizing (arithmetic's: 16 new tokens per
turn, 300 steps) unless its class declares `default_sizing`, e.g.

    class EchoEnv(TextEnv):
        default_sizing = {"rollout.max_new_tokens_per_turn": 64, "trainer.steps": 100}

Declared values apply unless the same key is given explicitly (command line or API overrides);
an env that declares nothing is told, once, which sizing it inherits. `check_prompt_fits` then
rejects a context budget that the env's prompts leave no room to generate in.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from omegaconf import DictConfig, OmegaConf

from gspo_agents.config import ConfigError

SIZING_KEYS = (
    "rollout.max_new_tokens_per_turn",
    "rollout.max_context_tokens",
    "rollout.num_samples_per_task",
    "trainer.steps",
    "trainer.lr",
    "trainer.sft.steps",
)


def explicit_keys(overrides: Iterable[str]) -> set[str]:
    """`a.b` for every `a.b=value` / `+a.b=value` / `++a.b=value` override."""
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}


def apply_env_sizing(cfg: DictConfig, explicit: set[str]) -> DictConfig:
    """A copy of `cfg` with the env class's declared sizing (explicit keys win)."""
    import envs

    cls = envs.env_class(cfg.env.name)
    declared = dict(getattr(cls, "default_sizing", {}) or {})
    missing = object()
    unknown = {k for k in declared if OmegaConf.select(cfg, k, default=missing) is missing}
    if unknown:
        raise ConfigError(
            f"{getattr(cls, '__name__', cfg.env.name)}.default_sizing names keys the config does not have: "
            f"{sorted(unknown)}; use full keys such as 'rollout.max_new_tokens_per_turn'"
        )
    builtin = cfg.env.name in envs.SHORT_NAMES or cfg.env.name.startswith("gspo/")
    if not declared and not builtin and cls is not None:
        inherited = ", ".join(f"{k}={OmegaConf.select(cfg, k)}" for k in SIZING_KEYS)
        print(
            f"note: {cls.__name__} declares no default_sizing; it runs with the env group's "
            f"({inherited}); override them on the command line or declare "
            f"{cls.__name__}.default_sizing",
            file=sys.stderr,
        )
    if not declared:
        return cfg
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    OmegaConf.set_struct(out, True)
    for key, value in declared.items():
        if key not in explicit:
            OmegaConf.update(out, key, value, merge=False)
    return out


def needs_sandbox(env_name: str) -> bool:
    import envs

    return bool(getattr(envs.env_class(env_name), "needs_sandbox", False))


def check_prompt_fits(cfg: DictConfig, env, tasks: list[dict], tokenizer) -> None:
    """Reject a context budget that leaves no room to generate after the longest prompt (of the
    first 256 tasks), instead of training on nothing."""
    from gspo_agents.rollout.chat import ChatFormat

    chat = ChatFormat(tokenizer)
    longest = 0
    for task in tasks[:256]:
        messages, _ = env.reset(options={"task": task})
        if isinstance(messages, list):  # malformed messages are reported per trajectory
            longest = max(longest, len(chat.prompt_ids(messages)))
    if longest and longest >= cfg.rollout.max_context_tokens:
        raise ValueError(
            f"rollout.max_context_tokens={cfg.rollout.max_context_tokens} leaves no room to "
            f"generate: the longest prompt of {cfg.env.name} is {longest} tokens; set "
            f"rollout.max_context_tokens to at least {longest + cfg.rollout.max_new_tokens_per_turn}"
        )
