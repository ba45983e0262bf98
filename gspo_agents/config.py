"""Run configuration: one small schema per Hydra config group.

The YAML files in `configs/` pick values; these dataclasses fix the keys and their types, so an
unknown key or a value of the wrong type fails at load time with Hydra's message naming the key.
Each component receives only its own group (`cfg.engine`, `cfg.trainer`, ...), never the whole run.

Names carry units and scope (`max_new_tokens_per_turn`, `request_timeout_s`). The set of keys is
snapshotted by a test, so growing the surface is a decision, not an accident.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.config_store import ConfigStore

from gspo_agents.config_checks import (  # noqa: F401 - re-exported: the config's checks
    CHOICES,
    MUST_BE_NON_NEGATIVE,
    MUST_BE_POSITIVE,
    ConfigError,
    check_choices,
)
from gspo_agents.rollout.records import RolloutConfig as RolloutRecord

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "configs")


@dataclass
class EnvConfig:
    name: str = (
        "arithmetic"  # short name (arithmetic, math, mathtool, codeforces) or a Gymnasium id
    )
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the env constructor
    train_split: str = "train"  # the split training samples tasks from
    test_split: str = "test"  # the held-out split
    max_train_tasks: int | None = None  # use only the first N training tasks (null: all)


@dataclass
class LoraConfig:
    """LoRA adapters (PEFT) trained instead of the full weights; the base stays frozen."""

    rank: int = 0  # 0: full fine-tuning; e.g. 8 or 16
    alpha: float = 16.0  # the adapter's update is scaled by alpha / rank
    # linear layers to adapt, by name (default: every linear map of the decoder blocks)
    target_modules: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )
    dropout: float = 0.0  # dropout on the adapter input while training (PEFT lora_dropout)


@dataclass
class ModelConfig:
    name: str = "tiny"  # tiny | tiny-agent | tiny-moe | hf
    path: str | None = None  # an HF directory; required when name=hf
    cache_dir: str = "~/.cache/gspo-agents/models"  # where tiny models are built once
    dtype: str = "float32"  # the learner's parameter dtype: float32 | bfloat16
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class EngineConfig:
    kind: str = "local"  # local | sglang
    urls: list[str] = field(default_factory=list)  # sglang: worker URLs or one router URL
    max_batch_size: int = 64  # local engine
    dtype: str = "float32"  # local engine: float32 | bfloat16 (a bf16 engine vs an fp32 trainer)
    connect_timeout_s: float = 5.0  # sglang: per-request connect timeout and /health wait
    request_timeout_s: float = 600.0  # sglang: one /generate request, start to end
    # how the trainer's pause around every weight update treats in-flight generations (SGLang's
    # /pause_generation modes; the local engine honours them too). abort: they return and resume
    # as new requests under the new weights; in_place / retract: the engine keeps them through
    # the update, and their tokens carry per-token versions (before it k, after it k+1)
    pause_mode: str = "abort"
    # sglang: how new weights reach the workers. disk: every worker loads the HF directory the
    # learner wrote (a filesystem all of them see). nccl: broadcast over torch.distributed (NCCL
    # on GPU, gloo on CPU) in buckets of update_bucket_mb, as slime and verl do; the directory is
    # still written, for checkpoints and for replaying the update to a worker that missed it.
    update_mode: str = "disk"
    update_bucket_mb: float = 512.0  # nccl updates: tensors sent per broadcast bucket


@dataclass
class SandboxConfig:
    backend: str = "auto"  # auto | docker | bubblewrap | namespaces | unsafe-local | remote
    max_concurrency: int = 4  # runs in flight (remote: over all services together)
    allow_unsafe_local: bool = False  # permit backend=unsafe-local (NO isolation)
    # remote: `python -m sandbox serve` instances or their load balancer; token: GSPO_SANDBOX_TOKEN.
    # Tool envs' sessions (CodeAgent-v0, MathTool-v1) go to the same services.
    urls: list[str] = field(default_factory=list)
    # docker (or auto): DOCKER_HOST-style engines to spread runs over, e.g. [ssh://gpu2,tcp://b:2375]
    docker_hosts: list[str] = field(default_factory=list)


@dataclass
class AlgorithmConfig:
    name: str = "gspo"  # gspo | gspo_token | grpo
    eps_low: float | None = None  # None: the algorithm's default (GSPO 3e-4, GRPO 0.2)
    eps_high: float | None = None  # None: the algorithm's default (GSPO 4e-4, GRPO 0.27)
    filter_zero_spread_groups: bool = True  # groups whose rewards all agree leave the batch
    # GSPO-token's per-turn credit: discount of the returns-to-go over turn rewards
    turn_discount: float = 1.0
    normalize_std: bool = True  # advantages divided by the group's reward std (false: Dr. GRPO)
    loss_agg: str = (
        "seq-mean-token-mean"  # loss aggregation; | token-mean | seq-mean-token-sum[-norm]
    )
    clip_ratio_c: float | None = None  # dual clip (> 1) of token ratios when A < 0 (grpo)
    kl_coef: float = 0.0  # penalty on KL to a frozen reference (the cold-start model)
    kl_estimator: str = "k3"  # k1 | k2 | k3 (Schulman's estimators)
    entropy_coef: float = 0.0  # entropy bonus on the model tokens
    old_logprobs: str = "engine"  # clip anchor: engine | recompute | decoupled (offpolicy.py)
    seq_is_cap: float | None = None  # truncated IS cap on pi_trainer / pi_engine per sequence
    seq_mask_bound: float | None = None  # drop sequences with |seq log-ratio| above this
    seq_is_ratio: str = "geometric"  # sequence IS weight: geometric (mean) | product (sum)
    routing_replay: bool = False  # MoE: replay the old policy's experts in the trainer
    routing_replay_source: str = "trainer"  # whose routes replay uses: trainer | engine (pi_old's)
    dynamic_sampling_rounds: int = 0  # extra rollout rounds to replace zero-spread groups
    overlong_filter: bool = False  # drop trajectories cut by a length budget from the loss
    overlong_penalty: float = 0.0  # subtracted from the reward of a length-cut trajectory
    overlong_buffer: int = 0  # DAPO's soft length penalty over the last N tokens (0: off)


def hydra_schema(record: type, **defaults: Any) -> type:
    """A mutable, slot-free dataclass with `record`'s fields, for Hydra's ConfigStore: a frozen
    record would make its config node read-only, and overrides could not be merged into it.
    `defaults` replace field defaults (e.g. an interpolation). The component's own record stays
    the single source of the fields; it validates the values when the component is built."""
    hints = typing.get_type_hints(record)
    unknown = set(defaults) - {f.name for f in dataclasses.fields(record)}
    if unknown:
        raise TypeError(f"{record.__name__} has no field(s) {sorted(unknown)}")

    def copy(f: dataclasses.Field) -> Any:
        if f.name in defaults:
            return field(default=defaults[f.name])
        if f.default_factory is not dataclasses.MISSING:
            return field(default_factory=f.default_factory)
        return field(default=f.default)

    fields = [(f.name, hints[f.name], copy(f)) for f in dataclasses.fields(record)]
    # _source_record: where --help reads the fields' descriptions (gspo_agents/cli_help.py)
    namespace = {"__module__": __name__, "_source_record": record}
    return dataclasses.make_dataclass(record.__name__, fields, namespace=namespace)


if TYPE_CHECKING:
    RolloutConfig = RolloutRecord
else:  # the manager's RolloutConfig, with the seed following trainer.seed (null: unseeded)
    RolloutConfig = hydra_schema(RolloutRecord, seed="${trainer.seed}")


@dataclass
class SFTConfig:
    """Cold start: a short supervised stage on the env's reference answers, cached by content."""

    enabled: bool = True  # cold-start on the env's reference answers before RL
    steps: int = 150  # SFT optimizer steps
    batch_size: int = 32  # examples per SFT step
    lr: float = 3e-3  # SFT learning rate
    max_examples: int = 2000  # reference examples used at most


@dataclass
class TrainerConfig:
    steps: int = 60  # GSPO steps (each: rollouts, then num_minibatches updates)
    tasks_per_step: int = 8  # tasks per step (each sampled num_samples_per_task times)
    lr: float = 1e-3  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    warmup_steps: int = 0  # linear learning-rate warmup, in optimizer steps
    max_grad_norm: float = 1.0  # gradient-norm clip
    num_minibatches: int = 4  # optimizer steps per rollout batch
    ppo_epochs: int = 1  # passes over each rollout batch (num_minibatches steps each)
    micro_batch_tokens: int = 8192  # tokens per forward/backward (docs/sizing.md)
    share_prompt_prefix: bool = True  # a group's shared prompt forwarded once (1 process, dense)
    logprob_chunk_tokens: int = 1024  # output layer positions at a time (0: full logits)
    packing: str = "auto"  # padding-free micro-batches: auto (varlen/flex attention), on, off
    activation_checkpointing: bool = False  # recompute each decoder layer in backward
    nproc: int = 1  # learner processes (FSDP2 ranks; >1 relaunches under torchrun)
    seed: int = 0  # seeds tasks, sampling and init (rollout.seed follows it)
    save_every_steps: int = 25  # periodic checkpoints (0: only at the end or an interrupt)
    resume: bool = True  # a run dir holding a checkpoint is resumed; false: moved aside first
    resume_with_changes: bool = False  # resume although settings differ (both configs kept)
    max_failed_steps: int = 3  # stop after this many steps in a row that trained nothing
    async_rollouts: bool = False  # overlap generation of step k+1 with the update of step k
    # pass@1 / pass@k (eval.k samples) on env.test_split every N steps and after the last;
    # 0: off. The first eval.max_tasks tasks at eval.temperature; eval/* in metrics.jsonl
    eval_every_steps: int = 0
    run_dir: str = "runs/${env.name}-${algorithm.name}-seed${trainer.seed}"  # checkpoints, logs
    sft: SFTConfig = field(default_factory=SFTConfig)  # the cold start


@dataclass
class LoggerConfig:
    wandb_mode: str = "offline"  # offline | online | disabled
    wandb_project: str = "gspo-agents"  # the wandb project runs log to
    console_every_steps: int = 1  # one console line every N steps (and the last)
    tensorboard: bool = False  # also write TensorBoard event files to RUN_DIR/tensorboard
    samples_every_steps: int = 10  # RUN_DIR/samples/stepN.jsonl every N steps (and the last)
    samples_per_step: int = 4  # trajectories saved per such step (0: no samples at all)


@dataclass
class EvalConfig:
    """`python -m gspo_agents.eval`: which weights, which split, how many samples."""

    model_path: str | None = None  # an HF directory; default: eval.run_dir's latest, else model
    run_dir: str | None = None  # a training run dir: evaluate its latest weights
    split: str = "test"  # the env split to evaluate
    k: int = 4  # samples per task: pass@1 averages them, pass@k from them
    temperature: float = 1.0  # sampling temperature of the evaluation
    max_tasks: int | None = 100  # the first N tasks of the split (null: all)
    out: str | None = None  # JSON path; default beside the run (see eval.eval_output_path)
    save_samples: bool = False  # every trajectory as text beside the report (.samples.jsonl)


@dataclass
class AgentConfig:
    """`agent=MODULE:FUNCTION`: your own agent loop (gspo_agents/rollout/agent.py) plays the
    episodes through the OpenAI-compatible endpoint; the env gives the tasks and the reward."""

    entry: str | None = None  # MODULE:FUNCTION (or path/to/file.py:FUNCTION); null: the env's loop


@dataclass
class RunConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)


def expand_shorthands(argv: list[str]) -> list[str]:
    """`agent=MODULE:FUNCTION` is `agent.entry=MODULE:FUNCTION` (agent is a key, not a group)."""
    return [f"agent.entry={a[len('agent=') :]}" if a.startswith("agent=") else a for a in argv]


def register_schemas() -> None:
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)


# --------------------------------------------------------------------------------------------
# command-line overrides, checked before Hydra so that a typo gets a "did you mean"
# --------------------------------------------------------------------------------------------
def config_groups() -> dict[str, list[str]]:
    """Config group -> its options (the YAML files under configs/<group>/)."""
    root = Path(CONFIG_DIR)
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in root.iterdir() if d.is_dir()}


def check_overrides(argv: list[str]) -> None:
    """Reject an unknown config group, group option or key with the closest valid names.

    `+key=value` (adding a key, e.g. env kwargs) and Hydra's own flags are left to Hydra."""
    groups = config_groups()
    for arg in argv:
        if arg.startswith(("-", "+")) or "=" not in arg:
            continue
        key, value = arg.lstrip("~").split("=", 1)
        if key.startswith("hydra"):
            continue
        if "." not in key and key in groups:
            _check_name(f"{key}={value}", value, groups[key], f"options of {key}")
        else:
            _check_key(key, groups)
            group, _, leaf = key.partition(".")
            valid = CHOICES.get((group, leaf))
            if valid:  # so that `--cfg job` rejects a misspelt value too
                _check_name(arg, value, list(valid), f"values of {key}")


def _check_key(key: str, groups: dict[str, list[str]]) -> None:
    parts = key.split(".")
    node: Any = RunConfig
    for depth, part in enumerate(parts):
        if not dataclasses.is_dataclass(node):
            return  # inside a free-form dict (env.kwargs) or a leaf: Hydra decides
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            where = ".".join(parts[:depth]) or "the config"
            valid = names if depth else sorted(set(names) | set(groups))
            _check_name(key, part, valid, f"keys of {where}")
        hint = typing.get_type_hints(node).get(part)
        node = hint if dataclasses.is_dataclass(hint) else None


def _check_name(arg: str, name: str, valid: list[str], what: str) -> None:
    if name in valid:
        return
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{arg}: {name!r} is not one of the {what} ({', '.join(valid)}).{hint}")
