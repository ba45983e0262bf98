"""The rollout side's components, built from the run config: env factory, sandbox, engine (and a
check that it answers), and the start model (after the cold start). The wiring `train.py` and
`eval.py` share; each builder hands its component only the settings it needs, never the whole
config.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import os
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gspo_agents.env_sizing import needs_sandbox


def build_env_factory(cfg: DictConfig, sandbox, chat_template: str | None = None):
    """Makes the run's envs; tool envs parse calls in `rollout.tool_format` (auto: the format
    `chat_template` teaches) unless `env.kwargs.tool_parser` names one."""
    import envs

    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    kwargs.update(session_kwargs(cfg, kwargs))
    extra = {"sandbox": sandbox} if sandbox is not None else {}
    tool_format = tool_format_override(cfg, kwargs, chat_template)

    def factory():
        env = envs.make(cfg.env.name, **kwargs, **extra)
        apply_tool_format(env, tool_format)
        return env

    return factory


def tool_format_override(cfg: DictConfig, kwargs: dict[str, Any], chat_template: str | None):
    """The tool-call format `rollout.tool_format` imposes on tool envs (auto: the one
    `chat_template` teaches), or None to leave each env its own: `env.kwargs.tool_parser` wins,
    and auto that finds Hermes keeps each env's default (a user env may default to its own)."""
    from envs.tools.parsers import resolve_tool_format

    setting = cfg.rollout.get("tool_format", "auto")
    tool_format = resolve_tool_format(setting, chat_template)
    override = "tool_parser" not in kwargs and (setting != "auto" or tool_format != "hermes")
    return tool_format if override else None


def apply_tool_format(env, tool_format: str | None) -> None:
    from envs.tools import ToolEnv

    inner = getattr(env, "unwrapped", env)
    if tool_format is not None and isinstance(inner, ToolEnv):
        inner.use_tool_format(tool_format)


def build_manager(cfg: DictConfig, engine, env_factory, tokenizer, rollout_cfg):
    """The RolloutManager playing the env's own episodes, or with `agent.entry` the AgentManager
    running the user's agent loop through the OpenAI-compatible endpoint (the env: tasks, the
    opening messages and the reward unless the agent returns one)."""
    entry = cfg.get("agent", {}).get("entry")
    if not entry:
        from gspo_agents.rollout.manager import RolloutManager

        return RolloutManager(engine, env_factory, tokenizer, rollout_cfg)
    from gspo_agents.agents import load_agent
    from gspo_agents.rollout.agent import AgentManager

    print(f"agent: {entry} (episodes through the OpenAI-compatible endpoint)", file=sys.stderr)
    return AgentManager(engine, tokenizer, load_agent(entry), rollout_cfg, env_factory=env_factory)


def session_kwargs(cfg: DictConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Under sandbox=remote, the env kwargs that put a tool env's sessions on the run's services
    (urls and token), checked now so that a dead fleet fails the run in seconds. An env whose
    kwargs already name remote services (backend=remote, session_options.urls) keeps them."""
    import envs

    cls = envs.env_class(cfg.env.name)
    if cfg.sandbox.backend != "remote" or not getattr(cls, "uses_sessions", False):
        return {}
    own = kwargs.get("session_options") or {}
    if kwargs.get("backend") == "remote" and own.get("urls"):
        return {}
    options = remote_options(cfg)
    from sandbox.service.remote import RemoteSandbox

    # train builds this outside an event loop: a dead fleet fails here, naming each URL's
    # problem; inside one (eval) the check waits for the first session, never blocking the loop
    RemoteSandbox(**options)
    if kwargs.get("backend", "auto") != "auto" or own:
        name = getattr(cls, "__name__", cfg.env.name)
        print(
            f"note: sandbox=remote: {name}'s sessions run on sandbox.urls "
            f"(instead of env.kwargs.backend={kwargs.get('backend')} session_options={own})",
            file=sys.stderr,
        )
    return {"backend": "remote", "session_options": options}


def remote_options(cfg: DictConfig) -> dict[str, Any]:
    """The remote backend's urls and token ($GSPO_SANDBOX_TOKEN, checked: a bad one fails here)."""
    from sandbox.service.auth import load_token

    options: dict[str, Any] = {"urls": list(cfg.sandbox.urls)}
    token = load_token(None)
    if token is not None:
        options["token"] = token
    return options


def build_sandbox(cfg: DictConfig, env_name: str):
    """A shared sandbox for envs whose class declares `needs_sandbox` (they run code)."""
    if not needs_sandbox(env_name):
        return None
    from sandbox import Sandbox, SandboxConfig

    remote = cfg.sandbox.backend == "remote"
    config = SandboxConfig(
        backend=cfg.sandbox.backend,
        max_concurrency=cfg.sandbox.max_concurrency,
        allow_unsafe_local=cfg.sandbox.allow_unsafe_local,
        docker_hosts=tuple(cfg.sandbox.docker_hosts),
        urls=tuple(cfg.sandbox.urls),
        extra={"token": remote_options(cfg).get("token")} if remote else {},
    )
    return Sandbox.from_config(config)


def build_engine(cfg: DictConfig, model_dir: str, seed: int):
    # engine-side routing replay needs the engine's routes (a MoE model; SGLang started with
    # --enable-return-routed-experts); each engine refuses at start when it cannot return them
    routes = bool(cfg.algorithm.routing_replay) and cfg.algorithm.routing_replay_source == "engine"
    if cfg.engine.kind == "local":
        from gspo_agents.rollout.local_engine import LocalEngine

        return LocalEngine(
            model_dir,
            max_batch_size=cfg.engine.max_batch_size,
            seed=seed,
            dtype=cfg.engine.dtype,
            pause_mode=cfg.engine.pause_mode,
            return_routed_experts=routes,
        )
    from gspo_agents.rollout.sglang_engine import SGLangEngine

    return SGLangEngine(
        list(cfg.engine.urls),
        connect_timeout_s=cfg.engine.connect_timeout_s,
        request_timeout_s=cfg.engine.request_timeout_s,
        pause_mode=cfg.engine.pause_mode,
        update_mode=cfg.engine.update_mode,
        update_bucket_mb=cfg.engine.update_bucket_mb,
        return_routed_experts=routes,
    )


async def check_engine_answers(cfg: DictConfig) -> None:
    """Fail in seconds, naming the URLs, when no engine worker answers; otherwise every
    trajectory of every step would quietly end as an engine error."""
    engine = build_engine(cfg, "", cfg.trainer.seed)
    try:
        healthy = await engine.health()
    finally:
        await engine.close()
    if not healthy:
        from gspo_agents.rollout.engine import EngineUnavailable

        raise EngineUnavailable(
            f"no SGLang worker answers at engine.urls={list(cfg.engine.urls)} (GET /health "
            f"within engine.connect_timeout_s={cfg.engine.connect_timeout_s}); start them with "
            "`python -m sglang.launch_server --model-path ... --port ...` (or "
            "`python -m gspo_agents.serve` on CPU) or fix engine.urls"
        )


def base_model_dir(cfg: DictConfig) -> str:
    """The model before any cold start (its tokenizer is the cold-started model's too)."""
    from gspo_agents.models import ModelConfig, resolve_model

    return resolve_model(ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True)))


def resolve_start_model(cfg: DictConfig, env) -> str:
    from gspo_agents.sft import NoReferenceResponses, ensure_cold_start

    model_dir = base_model_dir(cfg)
    if not cfg.trainer.sft.enabled or cfg.model.name == "hf":
        return model_dir
    from gspo_agents.models import load_tokenizer

    # the references in the format the rollouts' parser reads (the base model's template)
    env_kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    template = getattr(load_tokenizer(model_dir), "chat_template", None)
    apply_tool_format(env, tool_format_override(cfg, env_kwargs, template))
    try:
        return ensure_cold_start(
            model_dir,
            env,
            cfg.env.name,
            env_kwargs,
            OmegaConf.to_container(cfg.trainer.sft, resolve=True),
            train_split=cfg.env.train_split,
            seed=cfg.trainer.seed,
        )
    except NoReferenceResponses:  # optional for an env: then RL starts from the base model
        print(
            f"note: {type(env).__name__} gives no reference_response, so there is no cold start: "
            f"RL starts from the base model {model_dir}, which may never earn a reward (the run "
            "then stops saying so). Give the env a reference_response(task) to cold-start on, "
            "or start from a fine-tuned model (model=hf model.path=DIR); "
            "trainer.sft.enabled=false skips the cold start without this note",
            file=sys.stderr,
        )
        return model_dir


def build_driver(cfg: DictConfig, model_dir: str, tokenizer: Any, env_factory):
    """One driving process's rollouts: (driver, engine). With `rollout.driver_process` a
    RolloutProcess, which builds its own engine, envs and sandbox in a spawned child (engine
    None here); otherwise a RolloutManager on this process's event loop and its engine."""
    if cfg.rollout.driver_process:
        from gspo_agents.rollout_process import RolloutProcess

        return RolloutProcess(cfg, model_dir, cfg.trainer.seed, tokenizer), None
    from gspo_agents.rollout.manager import RolloutConfig

    engine = build_engine(cfg, model_dir, cfg.trainer.seed)
    rollout_cfg = RolloutConfig(**OmegaConf.to_container(cfg.rollout, resolve=True))
    return build_manager(cfg, engine, env_factory, tokenizer, rollout_cfg), engine


def serve_local_engine(cfg: DictConfig, model_dir: str):
    """engine=local with rollout.drivers=all_ranks: rank 0 serves the LocalEngine over loopback
    HTTP (`python -m gspo_agents.serve`, a subprocess), so that every rank's SGLangEngine client
    drives against the one engine. Returns the ServerProcess; stop() it at the end."""
    from gspo_agents.serve import launch

    e = cfg.engine
    extra = ["--seed", str(cfg.trainer.seed), "--max-batch-size", str(e.max_batch_size)]
    extra += ["--dtype", e.dtype]
    if cfg.algorithm.routing_replay and cfg.algorithm.routing_replay_source == "engine":
        extra.append("--enable-return-routed-experts")
    server = launch(model=None, model_path=model_dir, extra_args=extra)
    atexit.register(server.stop)  # also when the run fails before it stops the server itself
    return server


def on_served_engine(cfg: DictConfig, url: str) -> DictConfig:
    """The run config with the engine replaced by the SGLang-compatible server at `url`."""
    return OmegaConf.merge(cfg, {"engine": {"kind": "sglang", "urls": [url]}})


def quiet_libraries() -> None:
    """Our console line is the progress display; silence per-load progress bars."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.disable_progress_bar()


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (torch, transformers, the model, the engine and its
    envs: millions of objects) out of the cyclic GC's reach, once, before the loop that drives
    episodes. Each full collection otherwise walks all of them again: at 1,024 concurrent
    episodes that was a third of the driver's CPU per /generate call (0.145 -> 0.100 ms,
    benchmarks/rollout_scale.py). Objects made later are collected as usual; what start-up made
    and later drops is freed by reference counting, only its reference cycles stay."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def startup_objects_frozen():
    """freeze_startup_objects() for the block; given back to the GC after it (a run in a process
    that goes on: tests, notebooks)."""
    freeze_startup_objects()
    try:
        yield
    finally:
        gc.unfreeze()


def check_one_host(process) -> None:
    """engine=local is served on rank 0's loopback: only ranks on its host can reach it."""
    from gspo_agents.config import ConfigError

    if int(os.environ.get("LOCAL_WORLD_SIZE", process.world_size)) != process.world_size:
        raise ConfigError(
            "rollout.drivers=all_ranks with engine=local serves the engine on rank 0's "
            "loopback, which ranks on other nodes cannot reach; use engine=sglang "
            "engine.urls=[...] (workers every node reaches) or rollout.drivers=rank0"
        )


async def close_rollouts(engine, sandbox) -> None:
    """A driving process's engine client, sandbox and tool envs' sessions (of this loop)."""
    if engine is not None:
        await engine.close()
    if sandbox is not None:
        await sandbox.aclose()
    if "sandbox.sessions" in sys.modules:
        await sys.modules["sandbox.sessions"].close_sessions()
    if "envs.openenv.container" in sys.modules:  # OpenEnv server images it started
        await asyncio.to_thread(sys.modules["envs.openenv.container"].close_servers)
