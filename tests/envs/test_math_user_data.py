"""Math-v0 with the user's own files: GSM8K answers, both splits explicit, gold answers checked
at load time (real math-verify pool), and the Hydra override spelled without `+`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envs.errors import TaskError
from envs.math.data import gsm8k_final_answer, load_math_file
from envs.math.env import MathEnv
from envs.math.verify import VerifierPool

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(max_workers=1)
    yield p
    p.close()


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GSM8K = {
    "question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
    "answer": "In May she sold 48/2 = <<48/2=24>>24 clips.\nAltogether 48+24 = <<48+24=72>>72.\n#### 72",
}


def test_gsm8k_answers_are_the_text_after_the_last_marker(tmp_path: Path):
    assert gsm8k_final_answer("x #### 1,234") == "1234"
    assert gsm8k_final_answer("a #### 1 #### -3.5 ") == "-3.5"
    rows = load_math_file(_write(tmp_path / "gsm8k.jsonl", [GSM8K]))
    assert rows[0]["answer"] == "72" and rows[0]["id"] == "gsm8k-0"
    with pytest.raises(TaskError, match="nothing after '####'"):
        load_math_file(_write(tmp_path / "empty.jsonl", [{"question": "q", "answer": "####  "}]))


def test_giving_one_split_does_not_silently_keep_the_shipped_other(tmp_path: Path, pool):
    path = _write(tmp_path / "train.jsonl", [GSM8K])
    env = MathEnv(train_path=path, pool=pool)
    assert [r["answer"] for r in env.load_tasks("train")] == ["72"]
    with pytest.raises(ValueError, match="test_path=shipped"):
        env.load_tasks("test")
    shipped = MathEnv(train_path=path, test_path="shipped", pool=pool)
    assert len(shipped.load_tasks("test")) >= 40


def test_bad_gold_answers_fail_at_load_time_naming_the_rows(tmp_path: Path, pool):
    rows = [
        {"id": "fine", "question": "1+1?", "answer": "2"},
        {"id": "broken", "question": "?", "answer": "\\frac{1}{"},
    ]
    env = MathEnv(train_path=_write(tmp_path / "t.jsonl", rows), test_path="shipped", pool=pool)
    with pytest.raises(TaskError, match=r"1 gold answer.*id 'broken'") as info:
        env.load_tasks("train")
    assert "t.jsonl" in str(info.value) and "'fine'" not in str(info.value)


def test_train_path_override_needs_no_plus():
    done = subprocess.run(
        [sys.executable, "-m", "gspo_agents.train", "env=math", "env.kwargs.train_path=/x.jsonl",
         "--cfg", "job"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "train_path: /x.jsonl" in done.stdout
