"""`run_then_exit`: how torchrun workers end (atexit handlers run, output flushed, the exit code
kept, then `os._exit`, skipping the interpreter finalization that can abort on gloo's threads)."""

import subprocess
import sys

import pytest

SCRIPT = """
import atexit, sys
from gspo_agents.learner.parallel import run_then_exit
atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
def main():
    print("unflushed output", end="")  # no newline: stays in the buffer unless flushed
    {body}
run_then_exit(main)
print("never reached")
"""


@pytest.mark.parametrize(
    ("body", "code", "stderr"),
    [
        ("pass", 0, ""),
        ("sys.exit(3)", 3, ""),
        ("sys.exit(None)", 0, ""),
        ("sys.exit('worker failed: no data')", 1, "worker failed: no data"),
    ],
)
def test_exit_code_atexit_handlers_and_buffered_output_survive(tmp_path, body, code, stderr):
    marker = tmp_path / "marker"
    script = SCRIPT.format(body=body)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(marker)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "unflushed output"
    assert stderr in proc.stderr
    assert marker.read_text() == "atexit ran"


def test_an_exception_propagates_with_its_traceback(tmp_path):
    script = SCRIPT.format(body="raise ValueError('boom')")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "ValueError: boom" in proc.stderr and "never reached" not in proc.stdout
