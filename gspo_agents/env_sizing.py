"""What an env class declares about itself, applied to the run: its sizing and its sandbox.

The built-in envs' sizing lives in their config group (configs/env/*.yaml). A custom env selected
by `env.name=myenv/Echo-v0` keeps the default group's sizing (arithmetic's: 16 new tokens per
turn, 300 steps) unless its class declares `default_sizing`, e.g.

    class EchoEnv(TextEnv):
        default_sizing = {"rollout.max_new_tokens_per_turn": 64, "trainer.steps": 100}

Declared values apply unless the same key is given explicitly (command line or API overrides);
an env that declares nothing is told, once, which sizing it inherits. Before any cold start,
`fit_to_prompts` raises the context and new-token budgets of such an env to fit its own prompts
and reference answers (`measure_prompts`), and rejects, in one line naming the numbers and the
override, a context that was set (explicitly, by the class or by a built-in env's group) too
short for the prompts; a new-token budget set shorter than the longest reference turn is named in
a note (the policy could not produce the turns its cold start trains on).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

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
    if not declared and not _builtin(cfg.env.name) and cls is not None:
        inherited = ", ".join(f"{k}={OmegaConf.select(cfg, k)}" for k in SIZING_KEYS)
        print(
            f"note: {cls.__name__} declares no default_sizing; it runs with the env group's "
            f"({inherited}), the context and new tokens per turn raised where its prompts need "
            f"more; override them on the command line or declare {cls.__name__}.default_sizing",
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


@dataclass(frozen=True, slots=True)
class PromptLengths:
    prompt: int  # the longest rendered prompt (tools included), in tokens
    reference: int  # the longest reference response, 0 when the env gives none
    turns: int  # the most model turns an episode may take


def measure_prompts(cfg: DictConfig, env, tasks: list[dict], tokenizer) -> PromptLengths:
    """Token lengths of the env's prompts and reference answers (of the first 256 tasks), as the
    rollouts render them."""
    from gspo_agents.rollout.chat import ChatFormat
    from gspo_agents.rollout.episode import tool_schemas

    chat = ChatFormat(tokenizer)
    tools = tool_schemas(env)
    prompt = reference = 0
    for task in tasks[:256]:
        messages, _ = env.reset(options={"task": task})
        if isinstance(messages, list):  # malformed messages are reported per trajectory
            prompt = max(prompt, len(chat.prompt_ids(messages, tools=tools)))
        answer = getattr(env, "reference_response", lambda _: None)(task)
        for turn in [answer] if isinstance(answer, str) else answer or []:  # one, or its turns
            reference = max(reference, len(tokenizer.encode(turn, add_special_tokens=False)))
    turns = cfg.rollout.max_turns or getattr(env, "max_turns", 1)
    return PromptLengths(prompt, reference, turns)


def fit_to_prompts(cfg: DictConfig, lengths: PromptLengths, explicit: set[str]) -> DictConfig:
    """A custom env that declares no sizing gets a context (and new tokens per turn) that fit its
    own prompts and reference answers; a context set explicitly, declared by the env class or by
    a built-in env's group that leaves no room to generate is rejected, naming the numbers and
    the override. Runs before the cold start, so a mistake costs seconds."""
    free = _derivable(cfg, explicit)
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    r = out.rollout
    key_new, key_ctx = "rollout.max_new_tokens_per_turn", "rollout.max_context_tokens"
    notes = []
    if key_new in free and lengths.reference + 8 > r.max_new_tokens_per_turn:
        notes.append(
            f"{key_new}={_round_up(lengths.reference + 8, 16)} (was {r.max_new_tokens_per_turn})"
        )
        r.max_new_tokens_per_turn = _round_up(lengths.reference + 8, 16)
    # room for every turn, and as much again for the observations between them
    needed = lengths.prompt + (2 * lengths.turns - 1) * r.max_new_tokens_per_turn
    if key_ctx in free and needed > r.max_context_tokens:
        notes.append(f"{key_ctx}={_round_up(needed, 64)} (was {r.max_context_tokens})")
        r.max_context_tokens = _round_up(needed, 64)
    if notes:
        print(
            f"note: {cfg.env.name}'s prompts are up to {lengths.prompt} tokens, its reference "
            f"answers up to {lengths.reference}, {lengths.turns} turn(s): using "
            f"{', '.join(notes)}; set them explicitly (or declare default_sizing) to choose",
            file=sys.stderr,
        )
    if lengths.reference + 1 > r.max_new_tokens_per_turn:  # + the end-of-turn token
        print(
            f"note: {cfg.env.name}'s reference turns are up to {lengths.reference} tokens (+1 to "
            f"end the turn) but {key_new}={r.max_new_tokens_per_turn}: the cold start trains on "
            "whole turns that the policy's generations would cut; set "
            f"{key_new}={_round_up(lengths.reference + 8, 16)} to let it produce them",
            file=sys.stderr,
        )
    if lengths.prompt >= r.max_context_tokens:
        at_least = lengths.prompt + r.max_new_tokens_per_turn
        raise ConfigError(
            f"rollout.max_context_tokens={r.max_context_tokens} leaves no room to generate: the "
            f"longest prompt of {cfg.env.name} is {lengths.prompt} tokens; set "
            f"rollout.max_context_tokens={_round_up(at_least, 64)} (at least {at_least})"
        )
    OmegaConf.set_struct(out, True)
    return out


def _derivable(cfg: DictConfig, explicit: set[str]) -> set[str]:
    """The sizing keys a custom env's prompts may set: neither given explicitly nor declared."""
    import envs

    if _builtin(cfg.env.name):
        return set()
    declared = getattr(envs.env_class(cfg.env.name), "default_sizing", None) or {}
    return {k for k in SIZING_KEYS if k not in explicit and k not in declared}


def _builtin(env_name: str) -> bool:
    import envs

    return env_name in envs.SHORT_NAMES or env_name.startswith("gspo/")


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to
