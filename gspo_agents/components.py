"""The rollout side's components, built from the run config: env factory, sandbox, engine (and a
check that it answers), and the start model (after the cold start). The wiring `train.py` and
`eval.py` share; each builder hands its component only the settings it needs, never the whole
config.
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig, OmegaConf

from gspo_agents.env_sizing import needs_sandbox


def build_env_factory(cfg: DictConfig, sandbox):
    import envs

    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    extra = {"sandbox": sandbox} if sandbox is not None else {}

    def factory():
        return envs.make(cfg.env.name, **kwargs, **extra)

    return factory


def build_sandbox(cfg: DictConfig, env_name: str):
    """A shared sandbox for envs whose class declares `needs_sandbox` (they run code)."""
    if not needs_sandbox(env_name):
        return None
    from sandbox import Sandbox

    return Sandbox.create(
        cfg.sandbox.backend,
        max_concurrency=cfg.sandbox.max_concurrency,
        allow_unsafe_local=cfg.sandbox.allow_unsafe_local,
    )


def build_engine(cfg: DictConfig, model_dir: str, seed: int):
    if cfg.engine.kind == "local":
        from gspo_agents.rollout.local_engine import LocalEngine

        return LocalEngine(
            model_dir, max_batch_size=cfg.engine.max_batch_size, seed=seed, dtype=cfg.engine.dtype
        )
    from gspo_agents.rollout.sglang_engine import SGLangEngine

    return SGLangEngine(
        list(cfg.engine.urls),
        connect_timeout_s=cfg.engine.connect_timeout_s,
        request_timeout_s=cfg.engine.request_timeout_s,
        pause_mode=cfg.engine.pause_mode,
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
        raise RuntimeError(
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
    try:
        return ensure_cold_start(
            model_dir,
            env,
            cfg.env.name,
            OmegaConf.to_container(cfg.env.kwargs, resolve=True),
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
