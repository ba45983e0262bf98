"""F7.1: bad configuration given to the real train CLI fails fast with a clear message.

Each case runs `python -m gspo_agents.train` with one mistake and checks: a non-zero exit, a
message that names the problem and the fix, and no hang (the subprocess timeout is the bound; an
engine URL nobody answers must not turn into a run of all-error steps).
"""

from __future__ import annotations

import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from hd_util import train
from timing import patience

pytestmark = [pytest.mark.slow, pytest.mark.timing]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = {
    "unknown_env_id": (
        ["env.name=nosuch/Env-v0"],
        [
            "Unknown environment 'nosuch/Env-v0'",
            "Registered ids:",
            "gspo/Arithmetic-v0",
            "gspo/Codeforces-v0",
            "gymnasium.register",
        ],
    ),
    "env_typo": (["env.name=arithmetc"], ["Did you mean 'arithmetic'"]),
    "env_kwarg_unknown": (
        ["+env.kwargs.bogus=1"],
        ["does not take", "'bogus'", "it takes: difficulty", "+env.kwargs.NAME=VALUE"],
    ),
    "env_kwarg_out_of_range": (
        ["++env.kwargs.difficulty=99"],
        ["difficulty must be one of [1, 2, 3, 4, 5], got 99"],
    ),
    "wrong_type_int": (
        ["trainer.steps=abc"],
        ["trainer.steps", "could not be converted to Integer"],
    ),
    "wrong_type_float": (
        ["rollout.temperature=hot"],
        ["rollout.temperature", "could not be converted to Float"],
    ),
    "unknown_key": (
        ["trainer.stepz=3"],
        ["'stepz' is not one of the keys of trainer", "Did you mean 'steps'"],
    ),
    "env_group_typo": (["env=arithmetc"], ["env=arithmetc", "Did you mean 'arithmetic'"]),
    "group_typo": (["trainr.steps=3"], ["Did you mean 'trainer'"]),
    "group_of_one": (
        ["rollout.num_samples_per_task=1"],
        ["rollout.num_samples_per_task=1", "a group of 1 has no spread", "use 2 or more"],
    ),
    "context_shorter_than_prompt": (
        ["rollout.max_context_tokens=8"],
        ["rollout.max_context_tokens=8 leaves no room", "the longest prompt of arithmetic is"],
    ),
    "zero_tasks_per_step": (
        ["trainer.tasks_per_step=0"],
        ["trainer.tasks_per_step must be > 0, got 0"],
    ),
    "negative_lr": (["trainer.lr=-1"], ["trainer.lr must be > 0, got -1"]),
    "bad_algorithm": (["algorithm.name=gpso"], ["Did you mean 'gspo'"]),
    "bad_sandbox_backend": (["sandbox.backend=dockr"], ["Did you mean 'docker'"]),
    "hf_without_path": (["model=hf"], ["model=hf needs model.path="]),
    "missing_model_path": (
        ["model=hf", "model.path=/nonexistent/model/dir"],
        ["/nonexistent/model/dir", "is not a Hugging Face checkpoint directory"],
    ),
    "engine_nobody_answers": (
        ["engine=sglang", "engine.urls=[http://127.0.0.1:{port}]", "engine.connect_timeout_s=2"],
        ["no SGLang worker answers", "http://127.0.0.1:{port}", "sglang.launch_server"],
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    """Every case's CLI run, three at a time (each is mostly Python start-up and imports)."""
    port = str(_free_port())
    root = tmp_path_factory.mktemp("bad_config")

    def one(case: str):
        overrides = [o.replace("{port}", port) for o in CASES[case][0]]
        run_dir = root / case
        try:
            return train(run_dir, "trainer.steps=1", *overrides, timeout=int(patience(120)))
        except subprocess.TimeoutExpired:
            return None

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(CASES, pool.map(one, CASES)))
    return {"port": port, **results}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_config_fails_fast_naming_the_problem(case, outcomes):
    proc, port = outcomes[case], outcomes["port"]
    assert proc is not None, f"{case}: the train CLI hung instead of failing"
    assert proc.returncode != 0, f"{case}: accepted\n{proc.stderr[-2000:]}"
    for fragment in CASES[case][1]:
        assert fragment.replace("{port}", port) in proc.stderr, (
            f"{case}: {fragment!r} missing from\n{proc.stderr[-2000:]}"
        )
    assert "step 1/1" not in proc.stderr  # failed before training, not after
