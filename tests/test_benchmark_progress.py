"""Every benchmark shows progress with an ETA on stderr (`gspo_agents.tracking.BenchProgress`).

The helper is tested on a fake clock; the scripts at source level (most need Docker, a GPU or
minutes), and one cheap benchmark for real: its progress on stderr, its table still on stdout.
"""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_agents.tracking import BENCH_PROGRESS_LINE, BenchProgress

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))
# shared modules of a benchmark, not run on their own (e2e_common serves e2e_ours and e2e_trl)
LIBRARIES = {"e2e_common.py"}
# helpers other benchmarks import, with no entry point of their own (nothing to show progress of)
HELPERS = {"loopback_fleet.py", "generate_clients.py"}
# stand-in servers other benchmarks start as processes: they serve until stopped, no rows
SERVERS = {"instant_sglang.py"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake_progress(total: int | None, **kwargs) -> tuple[BenchProgress, FakeClock, io.StringIO]:
    clock, stream = FakeClock(), io.StringIO()
    return BenchProgress("rows", total, clock=clock, stream=stream, **kwargs), clock, stream


def test_progress_line_shows_done_elapsed_and_eta_from_the_pace():
    progress, clock, stream = fake_progress(10)
    assert progress.tick(0) == "  rows: 0/10 | 0s | eta ?"
    clock.now += 30
    assert progress.tick(3) == "  rows: 3/10 | 30s | eta 1m10s"  # 10 s a unit, 7 left
    clock.now += 10
    assert progress.tick() == "  rows: 4/10 | 40s | eta 1m00s"  # no argument: one more
    assert stream.getvalue().splitlines() == [
        "  rows: 0/10 | 0s | eta ?",
        "  rows: 3/10 | 30s | eta 1m10s",
        "  rows: 4/10 | 40s | eta 1m00s",
    ]


def test_progress_without_a_total_has_no_eta():
    progress, clock, _ = fake_progress(None)
    clock.now += 5
    assert progress.tick(2) == "  rows: 2 | 5s | eta ?"


def test_min_interval_thins_lines_but_keeps_the_first_and_the_last():
    progress, clock, stream = fake_progress(4, min_interval_s=5.0)
    for _ in range(4):
        clock.now += 1
        progress.tick()
    clock.now += 10
    progress.tick(4)  # nothing moved on: no second last line
    lines = stream.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["  rows: 1/4", "  rows: 4/4"]


def test_progress_lines_are_recognised_and_other_lines_are_not():
    progress, clock, _ = fake_progress(10)
    clock.now += 3700
    assert BENCH_PROGRESS_LINE.match(progress.tick(1))  # "1h01m"
    assert BENCH_PROGRESS_LINE.match("  ours x1, updates: 2/6 | 1m02s | eta 2m04s")
    assert not BENCH_PROGRESS_LINE.match("step 3/6 |   12.3s | eta 20s | reward 0.5")
    assert not BENCH_PROGRESS_LINE.match('RESULT {"run": "ours"}')


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_reports_progress(script: Path):
    source = script.read_text(encoding="utf-8")
    if script.name in LIBRARIES:
        assert "BenchProgress" in source
        return
    if script.name in SERVERS:
        assert "serve_forever" in source, f"{script.name} is listed as a server but serves nothing"
        return
    if script.name in HELPERS:
        assert "__main__" not in source, f"{script.name} runs on its own: show its progress"
        return
    # made here, or by the module its workers share (e2e_common.step_progress), and ticked here
    made = "BenchProgress(" in source or "step_progress(" in source
    assert made and ".tick(" in source, (
        f"{script.name} shows no progress: tick a gspo_agents.tracking.BenchProgress"
    )


def test_a_real_benchmark_prints_progress_on_stderr_and_its_table_on_stdout():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "benchmarks/rollout_overhead.py", "--sizes", "16", "32", "--turns", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    progress = [x for x in proc.stderr.splitlines() if BENCH_PROGRESS_LINE.match(x)]
    assert [x.split(" | ")[0] for x in progress] == [
        "  trajectories, all rows: 16/48",
        "  trajectories, all rows: 48/48",
    ]
    assert progress[-1].endswith("| eta 0s")
    assert "| concurrent trajectories |" in proc.stdout
    assert "| eta " not in proc.stdout
