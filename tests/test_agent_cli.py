"""`python -m gspo_agents.train agent=MODULE:FUNCTION env=...`: a user's agent loop trained from
the command line. The README's agent file and command run verbatim (a real `openai` client, the
CLI's logging, weights and checkpoint); the env's opening messages and its reward reach the
agent path; the options that cannot apply are refused in one line before torch loads."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from doc_recipes import blocks, metrics_rows
from test_manager_support import tiny_model_dir, tiny_tokenizer

from gspo_agents.config import ConfigError, expand_shorthands

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
pytest.importorskip("openai")


def readme_agent_file() -> str:
    [body] = [b for b in blocks(README, "python") if b.startswith("# my_agent.py")]
    return body


def readme_agent_command() -> list[str]:
    [line] = [
        line
        for body in blocks(README, "bash")
        for line in body.splitlines()
        if "agent=my_agent:agent" in line
    ]
    return shlex.split(line)


def train_cli(args: list[str], cwd: Path, timeout_s: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.mark.slow
def test_the_readme_agent_trains_two_steps_from_the_cli_and_resumes(tmp_path):
    (tmp_path / "my_agent.py").write_text(readme_agent_file())
    python, *args = readme_agent_command()
    assert python == "python"
    done = train_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "agent: my_agent:agent" in done.stderr
    run_dir = tmp_path / "runs/my-agent"
    rows = metrics_rows(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["rollout/trajectories"] == 8 and row["rollout/complete"] == 8
        assert row["rollout/num_turns_mean"] == 2 and row["rollout/prefix_breaks"] == 0
        assert row["trained_nothing"] == 0.0 and row["num_signal_seqs"] > 0
    assert rows[1]["rollout/weight_version"] == 1.0  # step 2 sampled step 1's weights
    assert (run_dir / "weights/step2/config.json").is_file()
    assert (run_dir / "checkpoint").is_dir()
    # the same command with one more step resumes the checkpoint: step 3 samples step 2's weights
    more = [a.replace("trainer.steps=2", "trainer.steps=3") for a in args]
    done = train_cli(more, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from step 2" in done.stderr
    rows = metrics_rows(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[2]["rollout/weight_version"] == 2.0
    assert rows[2]["trained_nothing"] == 0.0 and (run_dir / "weights/step3").is_dir()


def test_the_agent_entry_is_checked_with_the_config(tmp_path, monkeypatch):
    from gspo_agents import Trainer

    assert expand_shorthands(["agent=m:f", "env=math"]) == ["agent.entry=m:f", "env=math"]
    (tmp_path / "cfg_agent.py").write_text("async def agent(ctx):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert Trainer("agent=cfg_agent:agent").config.agent.entry == "cfg_agent:agent"
    with pytest.raises(ConfigError, match="async_rollouts=True: the endpoint records"):
        Trainer("agent.entry=cfg_agent:agent", "trainer.async_rollouts=true")
    with pytest.raises(ConfigError, match="Did you mean 'agent'"):
        Trainer("agent.entry=cfg_agent:agnt")


@pytest.mark.slow
def test_agent_typos_and_refusals_are_one_line_before_torch(tmp_path):
    (tmp_path / "my_agent.py").write_text("async def agent(ctx):\n    return 1.0\n")
    cases = [
        (["agent=my_agent:agnet"], "Did you mean 'agent'?"),
        (["agent=no_such_module:agent"], "no module 'no_such_module'"),
        (["agent=my_agent"], "write MODULE:FUNCTION"),
        (["agent=my_agent:agent", "trainer.async_rollouts=true"], "trainer.async_rollouts"),
        (["agent=my_agent:agent", "trainer.eval_every_steps=2"], "env's own episode loop"),
    ]
    for overrides, expected in cases:
        done = train_cli(["-X", "importtime", "-m", "gspo_agents.train", *overrides], tmp_path)
        errors = [x for x in done.stderr.splitlines() if x.startswith("error: ")]
        assert done.returncode == 1 and len(errors) == 1, done.stderr[-2000:]
        assert expected in errors[0], errors[0]
        imported = {row.split("|")[-1].strip() for row in done.stderr.splitlines() if "|" in row}
        assert "torch" not in imported, overrides


def test_a_file_path_entry_loads_and_a_sync_function_is_refused(tmp_path):
    from gspo_agents.agents import load_agent

    path = tmp_path / "agents_here.py"
    path.write_text("def plain(ctx):\n    return 1\n\nasync def play(ctx):\n    return 2\n")
    assert load_agent(f"{path}:play").__name__ == "play"
    with pytest.raises(ConfigError, match="not an async function.*async functions there: play"):
        load_agent(f"{path}:plain")


async def test_the_env_gives_the_prompt_and_scores_what_the_agent_answers():
    """With an env: ctx.messages is its reset observation; a returned string, or (None) the
    last reply, is scored by one env step; a number is the agent's own reward; an env whose
    episode an answer does not end is an error trajectory, never reward 0."""
    import envs
    from gspo_agents.rollout.agent import AgentManager
    from gspo_agents.rollout.local_engine import LocalEngine
    from gspo_agents.rollout.records import RolloutConfig
    from gspo_agents.trajectory import Status

    openai = pytest.importorskip("openai")
    seen: list = []

    async def agent(ctx):
        seen.append(ctx.messages)
        client = openai.AsyncOpenAI(base_url=ctx.base_url, api_key="-", default_headers=ctx.headers)
        await client.chat.completions.create(
            model=ctx.model, messages=list(ctx.messages), max_tokens=3
        )
        await client.close()
        return {"right": f"\\boxed{{{ctx.task['answer']}}}", "wrong": "\\boxed{-1}"}.get(
            ctx.task["say"], 0.5 if ctx.task["say"] == "own" else None
        )

    env = envs.make("arithmetic")
    (row,) = env.load_tasks("train")[:1]
    tasks = [{**row, "id": say, "say": say} for say in ("right", "wrong", "own", "last")]
    engine = LocalEngine(tiny_model_dir(), max_batch_size=8, seed=0)
    cfg = RolloutConfig(num_samples_per_task=2, max_new_tokens_per_turn=3)
    chain = {"n": 0}

    def factory():
        chain["n"] += 1
        return envs.make("arithmetic")

    manager = AgentManager(engine, tiny_tokenizer(), agent, cfg, env_factory=factory)
    try:
        right, wrong, own, last = (await manager.collect(tasks)).groups
        multi = AgentManager(
            engine,
            tiny_tokenizer(),
            agent,
            cfg,
            env_factory=lambda: envs.make("arithmetic_chain"),
        )
        chain_rows = envs.make("arithmetic_chain").load_tasks("train")[:1]
        (unended,) = (await multi.collect([{**chain_rows[0], "say": "wrong"}])).groups
    finally:
        await manager.aclose()
        await multi.aclose()
        await engine.close()
    assert seen[0] == tuple(env.reset(options={"task": row})[0])  # the env's own prompt
    assert chain["n"] == 8  # a fresh env per episode
    assert [t.reward for t in right] == [1.0, 1.0] and right[0].status == Status.COMPLETE
    assert [t.reward for t in wrong] == [0.0, 0.0]
    assert [t.reward for t in own] == [0.5, 0.5]
    assert all(t.status == Status.COMPLETE and t.reward is not None for t in last)
    assert all(t.status == Status.ERROR for t in unended)
    assert "did not end its episode" in unended[0].error
    assert unended[0].info["error_kind"] == "env_exception"  # the env's, not the agent's
