"""Environment registration: built-in ids, short names, third-party plugins, and `make`.

Built-in environments are registered with Gymnasium under the `gspo` namespace with string
entry points, so importing `envs` imports neither math-verify nor the sandbox. A user's own
environment is registered either directly with `gymnasium.register(...)` before training starts,
or from an installed package through the entry-point group `gspo_agents.envs`: each entry point
is a callable that registers envs (called with no arguments) or a module whose import registers
them. `make` accepts a short name (`arithmetic`) or any registered id (`myenv/Echo-v0`).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import logging
import warnings
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from envs.base import TextEnv
from envs.errors import UnknownEnv

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "gspo_agents.envs"

# id -> lazy entry point; the classes are imported only when an env is made.
BUILTIN_ENVS: dict[str, str] = {
    "gspo/Arithmetic-v0": "envs.arithmetic:ArithmeticEnv",
    "gspo/ArithmeticChain-v0": "envs.arithmetic_chain:ArithmeticChainEnv",
    "gspo/Math-v0": "envs.math.env:MathEnv",
    "gspo/MathTool-v0": "envs.mathtool:MathToolEnv",
    "gspo/MathTool-v1": "envs.mathtool_v1:MathToolV1Env",
    "gspo/CodeAgent-v0": "envs.codeagent.env:CodeAgentEnv",
    "gspo/Codeforces-v0": "envs.codeforces.env:CodeforcesEnv",
    "gspo/SWE-v0": "envs.swe.env:SWEEnv",
    "gspo/Verifiers-v0": "envs.verifiers_env.env:VerifiersEnv",
    "gspo/OpenEnv-v0": "envs.openenv.env:OpenEnvEnv",
}
# Command-line names (`env=math`) -> ids.
SHORT_NAMES: dict[str, str] = {
    "arithmetic": "gspo/Arithmetic-v0",
    "arithmetic_chain": "gspo/ArithmeticChain-v0",
    "math": "gspo/Math-v0",
    "mathtool": "gspo/MathTool-v0",
    "mathtool-v1": "gspo/MathTool-v1",
    "codeagent": "gspo/CodeAgent-v0",
    "codeforces": "gspo/Codeforces-v0",
    "swe": "gspo/SWE-v0",
    "verifiers": "gspo/Verifiers-v0",
    "openenv": "gspo/OpenEnv-v0",
}

_plugins_loaded: set[str] = set()
_plugin_errors: dict[str, str] = {}


def register_builtin_envs() -> None:
    """Register the built-in envs (idempotent: Gymnasium warns on re-registration)."""
    for env_id, entry_point in BUILTIN_ENVS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True)


def load_plugins(*, rescan: bool = False) -> list[str]:
    """Run every `gspo_agents.envs` entry point not run yet; returns the names it ran.

    A plugin that fails to import or register is skipped with a warning (one broken package must
    not take down every env); its error is repeated if its env is then asked for by name.
    `rescan=True` drops the import system's directory caches first, so a package installed
    after this process started is found.
    """
    if rescan:
        importlib.invalidate_caches()
    ran: list[str] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = f"{ep.name}={ep.value}"
        if key in _plugins_loaded or (key in _plugin_errors and not rescan):
            continue
        try:
            target = ep.load()
            if callable(target):
                target()
        except Exception as exc:  # third-party code: report it, keep the other envs usable
            _plugin_errors[key] = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"env plugin {key!r} (entry-point group {ENTRY_POINT_GROUP!r}) failed: "
                f"{_plugin_errors[key]}. Fix or uninstall the package that declares it.",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        _plugin_errors.pop(key, None)
        _plugins_loaded.add(key)
        ran.append(ep.name)
    return ran


def registered_ids() -> list[str]:
    """Env ids usable here: ours and third-party ones (Gymnasium's own control tasks left out)."""
    register_builtin_envs()
    load_plugins()
    return [i for i in sorted(gym.registry) if not _is_gymnasium_builtin(i)]


def resolve_id(name_or_id: str) -> str:
    """Map a short name or id to a registered id; unknown names raise ValueError with hints."""
    register_builtin_envs()
    env_id = SHORT_NAMES.get(name_or_id, name_or_id)
    if env_id in gym.registry:  # the hot path: the trainer makes one env per trajectory
        return env_id
    load_plugins()
    if env_id in gym.registry:
        return env_id
    if load_plugins(rescan=True) and env_id in gym.registry:  # installed since we last looked
        return env_id
    raise UnknownEnv(_unknown_message(name_or_id))


def _unknown_message(name: str) -> str:
    candidates = sorted(SHORT_NAMES) + sorted(gym.registry)
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
    lowered = {c.lower(): c for c in candidates}
    if name.lower() in lowered and lowered[name.lower()] not in close:
        close.insert(0, lowered[name.lower()])
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    ours = [i for i in sorted(gym.registry) if not _is_gymnasium_builtin(i)]
    broken = "".join(f" Plugin {k!r} failed to load ({v})." for k, v in _plugin_errors.items())
    return (
        f"Unknown environment {name!r}.{hint}{broken} Short names: {', '.join(sorted(SHORT_NAMES))}. "
        f"Registered ids: {', '.join(ours)}. A custom env must be registered with "
        f"gymnasium.register(id=..., entry_point=...) or through the {ENTRY_POINT_GROUP!r} "
        "entry-point group of an installed package."
    )


def _is_gymnasium_builtin(env_id: str) -> bool:
    entry = gym.registry[env_id].entry_point
    origin = entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""
    return origin.startswith(("gymnasium.", "shimmy.", "ale_py."))


def env_class(name_or_id: str) -> type | None:
    """The class an env id builds, without building it (None when its entry point is a factory
    function): the trainer reads `needs_sandbox` and `default_sizing` from it."""
    spec = gym.spec(resolve_id(name_or_id))
    entry = spec.entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return creator if isinstance(creator, type) else None


def make(name_or_id: str, **kwargs: Any) -> TextEnv:
    """Build an environment from a short name or id; kwargs override the spec's kwargs.

    Unlike `gymnasium.make` this adds no wrappers: the rollout manager needs the env's own
    `astep`, `load_tasks` and `reference_response`, which wrappers would hide.
    """
    env_id = resolve_id(name_or_id)
    spec = gym.spec(env_id)
    if spec.entry_point is None:
        raise ValueError(f"environment {env_id!r} was registered without an entry_point")
    creator = (
        load_env_creator(spec.entry_point)
        if isinstance(spec.entry_point, str)
        else spec.entry_point
    )
    try:
        env = creator(**{**spec.kwargs, **kwargs})
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        raise TypeError(
            f"environment {env_id!r} got an argument it does not take ({exc}); it takes: "
            f"{_parameters(creator)} (on the command line: +env.kwargs.NAME=VALUE)"
        ) from exc
    if not isinstance(env, TextEnv):
        raise TypeError(
            f"environment {env_id!r} built a {type(env).__name__}, not an envs.base.TextEnv; "
            "subclass envs.base.TextEnv so the trainer can drive it with chat messages."
        )
    return env


def _parameters(creator: Any) -> str:
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return "(signature unknown)"
    return ", ".join(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
