"""Issue 35: errors a user can cause end in one `error:` line naming the fix, fast.

The typo check runs before torch is imported; data and infrastructure errors (unknown env id,
missing or malformed task files, no SGLang, no Docker daemon, no weights to evaluate, a run dir
that cannot be created, a busy port) are one line; `--debug` brings the traceback back.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python(
    *args: str, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return errors[0]


def imported_modules(stderr: str) -> set[str]:
    """The modules `python -X importtime` reports (one `import time: ... | name` line each)."""
    return {row.split("|")[-1].strip() for row in stderr.splitlines() if "|" in row}


def test_a_key_typo_is_rejected_before_torch_is_imported():
    done = python("-X", "importtime", "-m", "gspo_agents.train", "trainer.total_steps=5")
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert "trainer.total_steps" in line and "Did you mean 'steps'?" in line
    imported = imported_modules(done.stderr)
    assert "gspo_agents.config" in imported  # the check ran here ...
    assert "torch" not in imported and "transformers" not in imported  # ... and nothing heavy


def test_an_invalid_choice_value_is_rejected_before_torch_is_imported():
    done = python("-X", "importtime", "-m", "gspo_agents.train", "trainer.lr=-1")
    assert done.returncode == 1
    assert "trainer.lr must be > 0" in one_error_line(done.stderr)
    assert "torch" not in imported_modules(done.stderr)


SFT_ENTRY_POINT = """
import sys
sys.argv = ["gspo-sft", "trainer.sft.stepz=5"]
from gspo_agents.sft import _main  # what the installed `gspo-sft` script runs
try:
    _main()
except SystemExit as exc:
    heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    print(f"exit {exc.code} heavy {heavy}")
"""


def test_gspo_sft_rejects_a_typo_before_torch_is_imported():
    done = python("-c", SFT_ENTRY_POINT)
    assert done.stdout.strip() == "exit 1 heavy []", done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert "trainer.sft.stepz" in line and "Did you mean 'steps'?" in line
    # ... and as `python -m gspo_agents.sft`, which runs the module's top level first
    done = python("-X", "importtime", "-m", "gspo_agents.sft", "trainer.total_steps=5")
    assert done.returncode == 1 and "Did you mean 'steps'?" in one_error_line(done.stderr)
    assert not {"torch", "transformers"} & imported_modules(done.stderr)


def test_debug_shows_the_traceback():
    done = python("-m", "gspo_agents.train", "trainer.total_steps=5", "--debug")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ConfigError" in done.stderr


def test_an_unknown_env_id_is_one_line_before_torch_is_imported(tmp_path):
    done = python(
        "-X", "importtime", "-m", "gspo_agents.train", "env.name=gspo/Nope-v0",
        f"trainer.run_dir={tmp_path / 'r'}",
    )  # fmt: skip
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert "Unknown environment 'gspo/Nope-v0'" in line and "Short names:" in line
    assert not {"torch", "transformers"} & imported_modules(done.stderr)
    assert not (tmp_path / "r").exists()


def test_user_errors_of_the_data_and_infrastructure_are_in_the_one_line_set(tmp_path):
    """Each case raises an exception the CLI prints as one line (checked here in-process; the
    subprocess tests above show the printing)."""
    import envs
    from envs.swe.instances import load_instances
    from gspo_agents.cli import user_errors

    cases = []
    with pytest.raises(Exception) as unknown:
        envs.make("gspo/Nope-v0")
    cases.append(unknown.value)
    with pytest.raises(FileNotFoundError) as missing:  # still a FileNotFoundError for callers
        load_instances(tmp_path / "nope.jsonl")
    assert "env.kwargs.source=swe:PATH" in str(missing.value)
    cases.append(missing.value)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": 3\n')
    with pytest.raises(ValueError) as malformed:
        load_instances(bad)
    assert f"{bad}:1: not a JSON object" in str(malformed.value)
    cases.append(malformed.value)
    for exc in cases:
        assert isinstance(exc, user_errors()), type(exc)


def test_an_sglang_engine_that_does_not_answer_is_a_user_error():
    from hydra import compose, initialize_config_dir

    from gspo_agents.cli import user_errors
    from gspo_agents.components import check_engine_answers
    from gspo_agents.config import CONFIG_DIR, register_schemas

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(
            config_name="config",
            overrides=[
                "engine=sglang",
                f"engine.urls=[http://127.0.0.1:{port}]",
                "engine.connect_timeout_s=2",
            ],
        )
    with pytest.raises(Exception) as caught:
        asyncio.run(check_engine_answers(cfg))
    assert isinstance(caught.value, user_errors())
    assert f"engine.urls=['http://127.0.0.1:{port}']" in str(caught.value)


def test_no_weights_to_evaluate_is_one_line(tmp_path):
    done = python("-m", "gspo_agents.eval", f"eval.run_dir={tmp_path}")
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert "has no exported weights/stepN" in line and "eval.model_path=DIR" in line


def test_a_run_dir_that_cannot_be_created_is_a_run_dir_error():
    from gspo_agents.rundir import RunDirError, own_run_dir

    with pytest.raises(RunDirError, match=r"trainer.run_dir=/proc/x cannot be created"):
        with own_run_dir(Path("/proc/x"), True, {}):
            pass


def test_no_docker_daemon_names_docker_host_and_leaves_no_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    sock = tmp_path / "nodocker.sock"
    done = python(
        "-m",
        "gspo_agents.train",
        "env=codeforces",
        "sandbox=docker",
        "trainer.sft.enabled=false",
        f"trainer.run_dir={run_dir}",
        env={"DOCKER_HOST": f"unix://{sock}"},
    )
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert f"DOCKER_HOST=unix://{sock}" in line and "the default socket" not in line
    assert not run_dir.exists()  # the sandbox is checked before the run dir is made


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_busy_port_is_one_line_suggesting_port_for_the_engine_server(busy_port):
    done = python("-m", "gspo_agents.serve", "--model", "tiny", "--port", str(busy_port))
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert f"127.0.0.1:{busy_port}" in line and "--port" in line
    assert "READY" not in done.stdout


def test_a_busy_port_fails_the_sandbox_service_before_it_says_serving(busy_port):
    done = python("-m", "sandbox", "serve", "--port", str(busy_port))
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert f"127.0.0.1:{busy_port}" in line and "--port" in line
    assert "serving" not in done.stderr


def test_ctrl_c_before_the_first_step_promises_no_cache_it_does_not_have(capsys, monkeypatch):
    from gspo_agents.cli import run_cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as ended:
        run_cli(interrupted, lambda argv: None)
    assert ended.value.code == 130
    err = capsys.readouterr().err
    assert "cached stages are reused" not in err
    assert "cut short starts over" in err
