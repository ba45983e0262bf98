"""benchmarks/rollout_scale.py in its smallest mode: the three scans run against stand-in
processes and print their tables, progress, and the JSON rows (issue 33)."""

from __future__ import annotations

import contextlib
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
        [
            sys.executable,
            "benchmarks/rollout_scale.py",
            "--smallest",
            "--breakdown",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for title in ("HTTP vs the manager's own", "CPU goes", "by history", "Driving processes"):
        assert title in proc.stdout
    assert "/proc/loadavg" in proc.stdout
    progress = [x for x in proc.stderr.splitlines() if BENCH_PROGRESS_LINE.match(x)]
    assert [x.split(" | ")[0] for x in progress][-1] == "  rows, all scans: 4/4"
    rows = json.loads(out.read_text())
    (n_row,) = rows["n_scan"]
    assert n_row["concurrent"] == 16 and n_row["turns"] == 16 * 4  # every episode, every turn
    assert n_row["http_cpu_ms_per_turn"] > 0 and n_row["manager_cpu_ms_per_turn"] > 0
    # The measured batch ran on the connections the warm one opened: a turn's cost, not a
    # connection's (1,000 of 1,024 were new when concurrent callers queued at engine start).
    assert n_row["connects"] == 0
    low, high = map(float, n_row["ratio_range"].split("-"))
    assert low <= n_row["ratio"] <= high  # the median of the rounds' own ratios
    # The breakdown: the manager alone, + the engine on a recorded answer, + the socket; each
    # row's added cost is what it adds to the one before.
    manager, engine, http = rows["breakdown"]
    assert "manager alone" in manager["what runs"] and "socket" in http["what runs"]
    assert manager["concurrent"] == engine["concurrent"] == http["concurrent"] == 16
    assert manager["added_ms"] == manager["cpu_ms_per_turn"] > 0
    # One round here: what a row adds is its cost less the row before's, in that round.
    for row, before in ((engine, manager), (http, engine)):
        added = row["cpu_ms_per_turn"] - before["cpu_ms_per_turn"]
        assert abs(row["added_ms"] - added) <= 0.002, rows["breakdown"]
        assert row["cpu_ms_per_turn"] > 0 and row["kernel_ms"] >= 0
    (h_row,) = rows["history_scan"]
    assert h_row["history_tokens"] == 256 and h_row["x_first"] == 1.0
    # The marginal turn split into the kernel's share (system time) and the rest.
    split = h_row["kernel_ms"] + h_row["user_ms"]
    assert abs(split - h_row["marginal_cpu_ms_per_turn"]) <= 0.002, h_row
    (p_row,) = rows["procs_scan"]
    assert p_row["procs"] == 1 and p_row["turns"] == 16 * 4 and p_row["turns_per_s"] > 0
    # One process against itself, round by round; its ceiling is one process by definition.
    assert p_row["x_first"] == 1.0 and p_row["x_ceiling"] == 1.0
    assert p_row["standin_cpu_ms_per_turn"] >= 0 and p_row["driver_cpu_ms_per_turn"] > 0


def test_the_ceiling_of_several_drivers_is_what_the_cores_leave_after_the_stand_ins(monkeypatch):
    """x_ceiling = min(P, cores * d / (d + s)): computed from measured CPU, never a constant."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import rollout_procs

    class FakeStandIns(list):
        def cpu_seconds(self):
            return 0.25  # s: 0.25 s over 2 x 500 turns = 0.25 ms per turn

    @contextlib.contextmanager
    def fake_launch(n, answer, stop):
        yield FakeStandIns([f"http://127.0.0.1:{9 + i}" for i in range(n)])

    class Proc:
        def __init__(self, target, args):
            self.args = args

        def start(self):
            url, *_, out = self.args
            out.put({"turns": 500, "started": 0.0, "finished": 1.0, "cpu_s": 0.5})  # d: 1 ms

        def join(self, timeout):
            pass

    class Ctx:
        def Barrier(self, n):
            return None

        def Queue(self):
            import queue

            return queue.Queue()

        Process = Proc

    monkeypatch.setattr(rollout_procs, "launch", fake_launch)
    monkeypatch.setattr(rollout_procs.mp, "get_context", lambda kind: Ctx())
    monkeypatch.setattr(rollout_procs, "answer_ids", lambda tok, n: [1, 2])
    monkeypatch.setattr(rollout_procs, "tokenizer", lambda: None)
    monkeypatch.setattr(rollout_procs.os, "cpu_count", lambda: 2)
    row = rollout_procs.measure(2, 8, 4, 32)
    assert row["driver_cpu_ms_per_turn"] == 1.0 and row["standin_cpu_ms_per_turn"] == 0.25
    assert row["x_ceiling"] == 1.6  # 2 cores * 1 / (1 + 0.25), under the 2 drivers
    monkeypatch.setattr(rollout_procs.os, "cpu_count", lambda: 16)
    assert rollout_procs.measure(2, 8, 4, 32)["x_ceiling"] == 2.0  # free cores: P itself
