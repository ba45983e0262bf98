"""benchmarks/rollout_scale.py in its smallest mode: the three scans run against stand-in
processes and print their tables, progress, and the JSON rows (issue 33)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_agents.tracking import BENCH_PROGRESS_LINE

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_rollout_scale_smallest_prints_three_tables_and_writes_its_rows(tmp_path):
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/rollout_scale.py", "--smallest", "--json", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for title in ("HTTP vs the manager's own", "by history", "Driving processes"):
        assert title in proc.stdout
    assert "/proc/loadavg" in proc.stdout
    progress = [x for x in proc.stderr.splitlines() if BENCH_PROGRESS_LINE.match(x)]
    assert [x.split(" | ")[0] for x in progress][-1] == "  rows, all scans: 3/3"
    rows = json.loads(out.read_text())
    (n_row,) = rows["n_scan"]
    assert n_row["concurrent"] == 16 and n_row["turns"] == 16 * 4  # every episode, every turn
    assert n_row["http_cpu_ms_per_turn"] > 0 and n_row["manager_cpu_ms_per_turn"] > 0
    (h_row,) = rows["history_scan"]
    assert h_row["history_tokens"] == 256 and h_row["x_first"] == 1.0
    (p_row,) = rows["procs_scan"]
    assert p_row["procs"] == 1 and p_row["turns"] == 16 * 4 and p_row["turns_per_s"] > 0
