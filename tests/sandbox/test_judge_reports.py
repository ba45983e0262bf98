"""What the judge tells a user: a crashed program's stderr in `python -m sandbox judge`, and
SandboxFusion's `execution_time` as wall time in `/run_code` (real backends, real HTTP)."""

from __future__ import annotations

from pathlib import Path

import httpx
from test_sandbox_cli import cli
from test_sandbox_service import _start

from sandbox.cli import STDERR_SHOWN


def test_judge_prints_the_stderr_of_a_crashed_program(tmp_path: Path) -> None:
    prog = tmp_path / "crash.py"
    prog.write_text("n = int(input())\nprint(10 // n)\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    for name, inp, out in (("1", "2", "5"), ("2", "0", "0")):
        (tests / f"{name}.in").write_text(inp + "\n")
        (tests / f"{name}.ans").write_text(out + "\n")
    done = cli("judge", str(prog), "--tests", str(tests), "--backend", "bubblewrap")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    crashed = next(i for i, line in enumerate(lines) if line.startswith("test 2: RE"))
    shown = "\n".join(lines[crashed + 1 :])
    assert "stderr:" in lines[crashed + 1]
    assert "ZeroDivisionError" in shown and "line 2" in shown
    assert "stderr" not in "\n".join(lines[:crashed])  # a passing test prints none


def test_judge_caps_a_long_stderr_to_its_tail(tmp_path: Path) -> None:
    prog = tmp_path / "noisy.py"
    prog.write_text("import sys\nsys.stderr.write('x' * 50000 + 'THE END')\nsys.exit(3)\n")
    (tmp_path / "1.in").write_text("")
    (tmp_path / "1.ans").write_text("\n")
    done = cli("judge", str(prog), "--tests", str(tmp_path), "--backend", "bubblewrap")
    assert done.returncode == 1
    assert "THE END" in done.stdout
    assert len(done.stdout) < STDERR_SHOWN + 1000
    assert f"last {STDERR_SHOWN} of" in done.stdout


def test_run_code_execution_time_is_wall_time_and_cpu_time_separate() -> None:
    proc, url = _start("bubblewrap")
    try:
        body = {"code": "import time\ntime.sleep(0.6)\nprint('up')", "language": "python"}
        reply = httpx.post(url + "/run_code", json=body, timeout=120).json()
    finally:
        proc.terminate()
        proc.wait()
    run = reply["run_result"]
    assert reply["status"] == "Success" and run["stdout"] == "up\n"
    # Sleeping costs wall time, not CPU time: CPU time as execution_time would be far below 0.6.
    assert run["execution_time"] >= 0.6
    assert 0 < run["cpu_time"] < run["execution_time"]
