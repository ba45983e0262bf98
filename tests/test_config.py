"""The run configuration: composition, validation messages, and the snapshot of its keys."""

import re
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from gspo_agents.config import CONFIG_DIR, check_choices, check_overrides, register_schemas

register_schemas()


def compose_run(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def flat_keys(node, prefix=""):
    keys = []
    for key, value in node.items():
        name = f"{prefix}{key}"
        if OmegaConf.is_dict(value) and key != "kwargs":
            keys += flat_keys(value, name + ".")
        else:
            keys.append(name)
    return keys


# Growing the config surface is a decision: update this list on purpose.
EXPECTED_KEYS = sorted(
    """env.name env.kwargs env.train_split env.test_split env.max_train_tasks
model.name model.path model.cache_dir model.dtype
model.lora.rank model.lora.alpha model.lora.target_modules model.lora.dropout
engine.kind engine.urls engine.max_batch_size engine.dtype engine.connect_timeout_s engine.request_timeout_s engine.pause_mode engine.update_mode engine.update_bucket_mb
sandbox.backend sandbox.max_concurrency sandbox.allow_unsafe_local sandbox.urls sandbox.docker_hosts
algorithm.name algorithm.eps_low algorithm.eps_high algorithm.filter_zero_spread_groups
algorithm.turn_discount algorithm.normalize_std algorithm.loss_agg algorithm.old_logprobs
algorithm.seq_is_cap algorithm.seq_mask_bound algorithm.routing_replay
algorithm.routing_replay_source
algorithm.dynamic_sampling_rounds algorithm.overlong_filter algorithm.overlong_penalty
algorithm.clip_ratio_c algorithm.kl_coef algorithm.kl_estimator algorithm.entropy_coef
algorithm.seq_is_ratio algorithm.overlong_buffer
rollout.num_samples_per_task rollout.max_new_tokens_per_turn rollout.max_context_tokens
rollout.max_turns rollout.max_live_trajectories rollout.temperature rollout.top_p rollout.top_k
rollout.max_staleness_steps rollout.max_version_lag rollout.trajectory_timeout_s rollout.seed
rollout.tool_format
rollout.past_reasoning rollout.drivers rollout.driver_process
trainer.steps trainer.tasks_per_step trainer.lr trainer.weight_decay trainer.warmup_steps
trainer.max_grad_norm trainer.num_minibatches trainer.ppo_epochs trainer.micro_batch_tokens
trainer.share_prompt_prefix trainer.logprob_chunk_tokens trainer.packing trainer.activation_checkpointing trainer.nproc trainer.seed trainer.save_every_steps trainer.resume trainer.resume_with_changes trainer.max_failed_steps trainer.async_rollouts trainer.eval_every_steps trainer.run_dir
trainer.sft.enabled trainer.sft.steps trainer.sft.batch_size trainer.sft.lr trainer.sft.max_examples
logger.wandb_mode logger.wandb_project logger.console_every_steps logger.tensorboard logger.samples_every_steps logger.samples_per_step
eval.model_path eval.run_dir eval.split eval.k eval.temperature eval.max_tasks eval.out eval.save_samples
agent.entry""".split()
)


def test_config_keys_are_a_deliberate_surface():
    assert sorted(flat_keys(compose_run())) == EXPECTED_KEYS


def test_group_options_set_their_values():
    cfg = compose_run(
        "env=codeforces", "algorithm=grpo", "engine=sglang", "engine.urls=[http://a:1]"
    )
    assert cfg.env.name == "codeforces" and cfg.algorithm.name == "grpo"
    assert cfg.rollout.max_new_tokens_per_turn > 64  # code needs longer turns than arithmetic
    check_choices(cfg)


def test_unknown_key_and_wrong_type_fail_at_load():
    with pytest.raises(Exception, match="trainer.stepz|stepz"):
        compose_run("trainer.stepz=3")
    with pytest.raises(Exception, match="steps"):
        compose_run("trainer.steps=many")


def test_invalid_choice_lists_valid_ones_with_a_suggestion():
    cfg = compose_run("algorithm.name=gpso")
    with pytest.raises(ValueError, match="gspo, gspo_token, grpo.*Did you mean 'gspo'"):
        check_choices(cfg)
    with pytest.raises(ValueError, match="model.path"):
        check_choices(compose_run("model=hf"))
    with pytest.raises(ValueError, match="engine.urls"):
        check_choices(compose_run("engine=sglang"))


def test_unknown_group_option_lists_the_available_ones():
    proc = subprocess.run(
        [sys.executable, "-m", "gspo_agents.train", "env=nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "arithmetic" in proc.stderr and "codeforces" in proc.stderr


def test_cfg_job_prints_the_resolved_config():
    proc = subprocess.run(
        [sys.executable, "-m", "gspo_agents.train", "env=math", "--cfg", "job"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    printed = OmegaConf.create(proc.stdout)
    assert printed.env.name == "math" and printed.algorithm.name == "gspo"


def test_algorithm_options_are_checked_before_any_model_is_built():
    with pytest.raises(ValueError, match="old_logprobs=recompute or decoupled"):
        check_choices(compose_run("algorithm.seq_is_cap=2.0"))
    with pytest.raises(ValueError, match="algorithm.loss_agg.*token-mean"):
        check_choices(compose_run("algorithm.loss_agg=sum"))
    with pytest.raises(ValueError, match="turn_discount"):
        check_choices(compose_run("algorithm.turn_discount=1.5"))
    with pytest.raises(ValueError, match="async_rollouts"):
        check_choices(
            compose_run("algorithm.dynamic_sampling_rounds=2", "trainer.async_rollouts=true")
        )
    check_choices(compose_run("algorithm.old_logprobs=decoupled", "algorithm.seq_is_cap=2.0"))


def test_engine_pause_mode_reaches_the_sglang_engine():
    import asyncio

    from gspo_agents.components import build_engine

    for overrides, mode in (([], "abort"), (["engine.pause_mode=retract"], "retract")):
        cfg = compose_run("engine=sglang", "engine.urls=[http://a:1]", *overrides)
        engine = build_engine(cfg, "unused", 0)
        assert engine.pause_mode == mode
        asyncio.run(engine.close())


def test_engine_pause_mode_reaches_the_local_engine_and_bad_modes_fail_early():
    import asyncio

    from test_manager_support import tiny_model_dir

    from gspo_agents.components import build_engine
    from gspo_agents.rollout.local_engine import LocalEngine

    cfg = compose_run("engine.pause_mode=in_place")
    engine = build_engine(cfg, tiny_model_dir(), 0)
    try:
        assert isinstance(engine, LocalEngine) and engine.pause_mode == "in_place"
    finally:
        asyncio.run(engine.close())
    with pytest.raises(ValueError, match="in_place"):
        check_choices(compose_run("engine.pause_mode=inplace"))
    with pytest.raises(ValueError, match=r"pause_mode='pause'.*engine.pause_mode"):
        LocalEngine(tiny_model_dir(), pause_mode="pause")  # type: ignore[arg-type]


def test_remote_sandbox_needs_urls_and_takes_them():
    with pytest.raises(ValueError, match="sandbox.urls"):
        check_choices(compose_run("sandbox=remote"))
    cfg = compose_run("sandbox=remote", "sandbox.urls=[http://sb1:8080,http://sb2:8080]")
    check_choices(cfg)
    assert cfg.sandbox.backend == "remote"
    assert list(cfg.sandbox.urls) == ["http://sb1:8080", "http://sb2:8080"]
    with pytest.raises(ValueError, match="remote"):
        check_choices(compose_run("sandbox.backend=remot"))


def test_cfg_job_rejects_a_misspelt_option_value_with_the_valid_list():
    proc = subprocess.run(
        [sys.executable, "-m", "gspo_agents.train", "--cfg", "job", "algorithm.kl_estimator=k4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "algorithm.kl_estimator" in proc.stderr and "(k1, k2, k3)" in proc.stderr
    with pytest.raises(ValueError, match="Did you mean 'seq-mean-token-sum-norm'"):
        check_overrides(["algorithm.loss_agg=seq-mean-token-sum-nrm"])


def test_issue_27_options_are_checked_before_any_model_is_built():
    with pytest.raises(ValueError, match="clip_ratio_c.*algorithm=grpo"):
        check_choices(compose_run("algorithm.clip_ratio_c=3.0"))
    check_choices(compose_run("algorithm=grpo", "algorithm.clip_ratio_c=3.0"))
    with pytest.raises(ValueError, match="overlong_buffer"):
        check_choices(
            compose_run("algorithm.overlong_buffer=16", "rollout.max_new_tokens_per_turn=16")
        )
    with pytest.raises(ValueError, match="seq_is_ratio=product"):
        check_choices(compose_run("algorithm.seq_is_ratio=product"))
    with pytest.raises(ValueError, match="kl_coef"):
        check_choices(compose_run("algorithm.kl_coef=-0.1"))
    with pytest.raises(ValueError, match="ppo_epochs"):
        check_choices(compose_run("trainer.ppo_epochs=0"))
    with pytest.raises(ValueError, match="max_version_lag"):
        check_choices(compose_run("rollout.max_version_lag=-1"))


def test_engine_update_mode_is_checked_and_reaches_the_sglang_engine():
    import asyncio

    from gspo_agents.components import build_engine

    with pytest.raises(ValueError, match="disk, nccl.*Did you mean 'nccl'"):
        check_choices(
            compose_run("engine=sglang", "engine.urls=[http://a:1]", "engine.update_mode=ncl")
        )
    with pytest.raises(ValueError, match="needs engine=sglang"):
        check_choices(compose_run("engine.update_mode=nccl"))
    with pytest.raises(ValueError, match="update_bucket_mb"):
        check_choices(compose_run("engine.update_bucket_mb=0"))
    sglang = ("engine=sglang", "engine.urls=[http://a:1]")
    cfg = compose_run(*sglang, "engine.update_mode=nccl", "engine.update_bucket_mb=64")
    check_choices(cfg)
    engine = build_engine(cfg, "unused", 0)
    assert engine._update_mode == "nccl" and engine._bucket_bytes == 64 * 2**20
    asyncio.run(engine.close())
    assert compose_run(*sglang).engine.update_mode == "disk"


def test_lora_keys_are_checked_before_any_model_is_built():
    from gspo_agents.config import ConfigError

    for override, says in [
        ("model.lora.rank=-1", "model.lora.rank must be >= 0"),
        ("model.lora.dropout=1.5", "model.lora.dropout must be in [0, 1)"),
        ("model.lora.alpha=0", "model.lora.alpha must be > 0"),
        ("model.lora.target_modules=[]", "model.lora.target_modules is empty"),
    ]:
        extra = [] if override.startswith("model.lora.rank") else ["model.lora.rank=8"]
        with pytest.raises(ConfigError, match=re.escape(says)):
            check_choices(compose_run(override, *extra))
    check_choices(compose_run("model.lora.rank=8"))  # the defaults are valid
