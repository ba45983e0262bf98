"""`python -m gspo_agents.eval env=codeforces eval.model_path=DIR [eval.k=8] [eval.split=test]`

pass@1 (averaged over k samples per task) and pass@k (the unbiased estimator of Chen et al. 2021)
on a held-out split, from any HF directory: a run's exported weights (`RUN_DIR/weights/stepN`),
`eval.run_dir=RUN_DIR` (its latest weights), or the configured model. Prints a table and writes
JSON. Trajectories that failed for infrastructure reasons are excluded and counted, not scored 0.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict, dataclass, field
from math import comb
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gspo_agents.cli import run_cli, user_errors_as_one_line
from gspo_agents.config import (
    CONFIG_DIR,
    ConfigError,
    check_choices,
    check_overrides,
    register_schemas,
)
from gspo_agents.rundir import write_config


class NoWeights(ConfigError):
    """eval.model_path or eval.run_dir names no loadable weights; the message says which."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass(slots=True)
class EvalReport:
    env: str
    split: str
    model: str
    k: int
    num_tasks: int = 0
    pass_at_1: float = 0.0
    pass_at_k: float = 0.0
    num_errors: int = 0
    num_tasks_available: int = 0  # the split's size before eval.max_tasks
    per_task: dict[str, dict] = field(default_factory=dict)

    def table(self) -> str:
        rows = [
            ("env", self.env),
            ("split", self.split),
            ("model", self.model),
            ("tasks", self._tasks()),
            ("samples / task", str(self.k)),
            ("pass@1", f"{self.pass_at_1:.4f}"),
            (f"pass@{self.k}", f"{self.pass_at_k:.4f}"),
            ("excluded (errors)", str(self.num_errors)),
        ]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"{name:<{width}} | {value}" for name, value in rows)

    def _tasks(self) -> str:
        if self.num_tasks_available > self.num_tasks:
            return f"{self.num_tasks} of {self.num_tasks_available} (eval.max_tasks)"
        return str(self.num_tasks)


def score_groups(groups, k: int, report: EvalReport) -> EvalReport:
    """Fill pass@1 / pass@k from groups of trajectories (reward 1.0 = solved)."""
    p1, pk = [], []
    for group in groups:
        scored = [t for t in group if t.trainable]
        report.num_errors += len(group) - len(scored)
        if not scored:
            continue
        n, c = len(scored), sum(1 for t in scored if float(t.reward) >= 1.0)
        p1.append(c / n)
        pk.append(pass_at_k(n, c, min(k, n)))
        report.per_task[group[0].task_id] = {"samples": n, "correct": c}
    report.num_tasks = len(p1)
    report.pass_at_1 = sum(p1) / len(p1) if p1 else 0.0
    report.pass_at_k = sum(pk) / len(pk) if pk else 0.0
    return report


def eval_metrics(report: EvalReport) -> dict[str, float]:
    """The `eval/*` metrics of a report (in metrics.jsonl, the console, the plots, TensorBoard)."""
    return {
        "eval/pass@1": report.pass_at_1,
        "eval/pass@k": report.pass_at_k,
        "eval/k": float(report.k),
        "eval/num_tasks": float(report.num_tasks),
        "eval/errors": float(report.num_errors),
    }


class HeldOutEval:
    """`trainer.eval_every_steps=N`: the env's held-out split (env.test_split, the first
    eval.max_tasks tasks) sampled eval.k times per task at eval.temperature with the engine's
    current weights, every N steps and after the last. Its own rollout manager on the training
    engine, made per evaluation, so it starts at the engine's weight version."""

    def __init__(self, cfg: DictConfig, env, env_factory, tokenizer) -> None:
        self.every = cfg.trainer.eval_every_steps
        self.last_step = cfg.trainer.steps
        self.tasks = env.load_tasks(cfg.env.test_split)[: cfg.eval.max_tasks or None]
        if not self.tasks:
            raise ConfigError(
                f"trainer.eval_every_steps={self.every}: env {cfg.env.name} has no tasks in its "
                f"held-out split env.test_split={cfg.env.test_split}; set another split or "
                "trainer.eval_every_steps=0"
            )
        rollout = OmegaConf.to_container(cfg.rollout, resolve=True)
        rollout.update(num_samples_per_task=cfg.eval.k, temperature=cfg.eval.temperature)
        self.rollout = rollout
        self.env_factory, self.tokenizer = env_factory, tokenizer
        self.name, self.split, self.k = cfg.env.name, cfg.env.test_split, cfg.eval.k

    def due(self, step: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == self.last_step)

    async def run(self, engine, step: int) -> dict[str, float]:
        from gspo_agents.rollout.manager import RolloutConfig, RolloutManager

        manager = RolloutManager(
            engine, self.env_factory, self.tokenizer, RolloutConfig(**self.rollout)
        )
        try:
            groups = (await manager.collect(self.tasks)).groups
        finally:
            await manager.aclose()
        report = EvalReport(self.name, self.split, f"step{step}", self.k)
        return eval_metrics(score_groups(groups, self.k, report))


def resolve_eval_model(cfg: DictConfig) -> str:
    from gspo_agents.models import ModelConfig, resolve_model

    if cfg.eval.model_path:
        path = Path(cfg.eval.model_path).expanduser()
        if not (path / "config.json").exists():
            raise NoWeights(
                f"eval.model_path={path} is not an HF directory (no config.json); point it at "
                "a run's weights/stepN or another Hugging Face model directory"
            )
        return str(path)
    if cfg.eval.run_dir:
        steps = sorted(
            Path(cfg.eval.run_dir, "weights").glob("step*"), key=lambda p: int(p.name[4:])
        )
        if not steps:
            raise NoWeights(
                f"eval.run_dir={cfg.eval.run_dir} has no exported weights/stepN (a run writes them "
                "after its first step); train it first, or give eval.model_path=DIR"
            )
        return str(steps[-1])
    return resolve_model(ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True)))


async def evaluate(cfg: DictConfig) -> EvalReport:
    import envs
    from gspo_agents.components import build_engine, build_env_factory, build_sandbox
    from gspo_agents.models import load_tokenizer
    from gspo_agents.rollout.manager import RolloutConfig, RolloutManager

    env_kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    env = envs.make(cfg.env.name, **env_kwargs)
    tasks = env.load_tasks(cfg.eval.split)
    available = len(tasks)
    if cfg.eval.max_tasks and available > cfg.eval.max_tasks:
        print(
            f"eval: evaluating the first {cfg.eval.max_tasks} of {available} {cfg.eval.split} "
            f"tasks (eval.max_tasks={cfg.eval.max_tasks}; eval.max_tasks=null evaluates all)",
            file=sys.stderr,
        )
        tasks = tasks[: cfg.eval.max_tasks]
    model_dir = resolve_eval_model(cfg)
    rollout = OmegaConf.to_container(cfg.rollout, resolve=True)
    rollout.update(num_samples_per_task=cfg.eval.k, temperature=cfg.eval.temperature)
    sandbox = build_sandbox(cfg, cfg.env.name)
    engine = build_engine(cfg, model_dir, cfg.trainer.seed)
    tokenizer = load_tokenizer(model_dir)
    env_factory = build_env_factory(cfg, sandbox, getattr(tokenizer, "chat_template", None))
    manager = RolloutManager(engine, env_factory, tokenizer, RolloutConfig(**rollout))
    try:
        groups = await collect_with_progress(manager, tasks)
    finally:
        await engine.close()
        if sandbox is not None:
            await sandbox.aclose()
        if "envs.openenv.container" in sys.modules:  # OpenEnv server images it started
            await asyncio.to_thread(sys.modules["envs.openenv.container"].close_servers)
    if cfg.eval.save_samples:
        save_eval_samples(eval_output_path(cfg, model_dir), groups, manager.chat.tokenizer)
    report = EvalReport(cfg.env.name, cfg.eval.split, model_dir, cfg.eval.k)
    report.num_tasks_available = available
    return score_groups(groups, cfg.eval.k, report)


def eval_output_path(cfg: DictConfig, model_dir: str) -> Path:
    """Where the report goes: `eval.out`; else beside the run that made the weights
    (`RUN_DIR/eval-<split>.json` for `eval.run_dir`, `eval-<split>-stepN.json` for one of a run's
    `weights/stepN`); else, for any other model, `runs/eval/<env>-<split>-<model dir name>.json`,
    so that evaluating a base or cold-start model never overwrites a training run's own report."""
    split = cfg.eval.split
    if cfg.eval.out:
        return Path(cfg.eval.out)
    if cfg.eval.run_dir:
        return Path(cfg.eval.run_dir) / f"eval-{split}.json"
    model = Path(model_dir)
    if model.parent.name == "weights" and (model.parent.parent / "metrics.jsonl").exists():
        return model.parent.parent / f"eval-{split}-{model.name}.json"
    return Path(cfg.trainer.run_dir).parent / "eval" / f"{cfg.env.name}-{split}-{model.name}.json"


def save_eval_samples(report_path: Path, groups: list, tokenizer) -> None:
    from gspo_agents import samples

    out = samples.write(
        report_path.with_suffix(".samples.jsonl"),
        (samples.record(t, tokenizer) for g in groups for t in g),
    )
    print(f"wrote {out} (read it with python -m gspo_agents.samples {out})", file=sys.stderr)


async def collect_with_progress(manager, tasks: list[dict], chunk: int = 8) -> list:
    """All tasks' groups, collected `chunk` tasks at a time with a progress line (and ETA) after
    each. Sampling seeds are per request, so chunking changes no sample."""
    from gspo_agents.tracking import Progress

    progress = Progress(len(tasks))
    groups: list = []
    for start in range(0, len(tasks), chunk):
        result = await manager.collect(tasks[start : start + chunk])
        groups.extend(result.groups)
        done = min(start + chunk, len(tasks))
        eta = progress.update(done)
        print(f"eval: {done}/{len(tasks)} tasks | eta {eta}", file=sys.stderr, flush=True)
    return groups


register_schemas()


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from gspo_agents.components import quiet_libraries

    quiet_libraries()
    with user_errors_as_one_line():
        check_choices(cfg)
        report = asyncio.run(evaluate(cfg))
    print(report.table())
    out = eval_output_path(cfg, report.model)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(asdict(report), indent=2))
    # eval's own config beside its result; the training run's config.yaml is never touched
    write_config(out.with_suffix(".config.yaml"), cfg)
    print(f"wrote {out}", file=sys.stderr)


def cli() -> None:
    """`gspo-eval` / `python -m gspo_agents.eval`."""
    run_cli(main, check_overrides)


if __name__ == "__main__":
    cli()
