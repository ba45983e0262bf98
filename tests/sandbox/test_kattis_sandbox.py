"""Kattis output validators, checker early stop, the compile cache and `python -m sandbox verify`
on real backends (docker and bubblewrap; under CI=true a missing one fails)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sbtest_util import make_sandbox

from sandbox import JudgeSpec, Program, Sandbox, TestCase, Verdict
from sandbox.judging.compile_cache import CompileCache, Entry

REPO = Path(__file__).resolve().parents[2]
SAMPLE_SET = REPO / "envs" / "data" / "kattis_sample"
CPP_ECHO = '#include <iostream>\nint main(){long long a;std::cin>>a;std::cout<<a*2<<"\\n";}\n'

# A Kattis output validator: argv input answer feedback_dir [flags]; the output on stdin.
VALIDATOR = """import os, sys
inp, ans, feedback = sys.argv[1:4]
flags = sys.argv[4:]
team = sys.stdin.read().split()
want = open(ans).read().split()
query = open(inp).read().strip()
open(os.path.join(feedback, "judgemessage.txt"), "w").write("checked")
if query == "crash":
    raise SystemExit(1)
if query == "zero":
    raise SystemExit(0)
if "lenient" in flags:
    team, want = [t.lower() for t in team], [w.lower() for w in want]
sys.exit(42 if team == want else 43)
"""


@pytest.fixture(params=["docker", "bubblewrap"])
async def sb(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    sandbox = make_sandbox(request.param, compile_cache=CompileCache())
    try:
        yield sandbox
    finally:
        await sandbox.aclose()


def kattis(flags: tuple[str, ...] = ()) -> JudgeSpec:
    return JudgeSpec(
        mode="checker",
        checker=Program("python", VALIDATOR),
        checker_protocol="kattis",
        checker_args=flags,
    )


ECHO = Program("python", "print(input())")


async def test_kattis_validator_exit_codes_decide_the_verdict(sb: Sandbox):
    ok = await sb.run(ECHO, [TestCase("Yes\n", "Yes\n")], judge=kattis())
    assert ok.verdict is Verdict.OK
    wrong = await sb.run(ECHO, [TestCase("Yes\n", "yes\n")], judge=kattis())
    assert wrong.verdict is Verdict.WA
    lenient = await sb.run(ECHO, [TestCase("Yes\n", "yes\n")], judge=kattis(("lenient",)))
    assert lenient.verdict is Verdict.OK
    for broken in ("crash", "zero"):  # a validator that fails is never the contestant's fault
        result = await sb.run(ECHO, [TestCase(f"{broken}\n", "x\n")], judge=kattis())
        assert result.verdict is Verdict.SE, broken


async def test_checker_mode_honours_early_stop(sb: Sandbox):
    tests = [TestCase("1\n", "1\n"), TestCase("2\n", "3\n"), TestCase("4\n", "4\n")]
    stopped = await sb.run(ECHO, tests, judge=kattis(), early_stop=True)
    assert stopped.verdict is Verdict.WA and len(stopped.tests) == 2
    full = await sb.run(ECHO, tests, judge=kattis())
    assert [t.verdict for t in full.tests] == [Verdict.OK, Verdict.WA, Verdict.OK]
    crash = Program("python", "import sys\nx = input()\nsys.exit(x == '1')")
    crashed = await sb.run(crash, tests, judge=kattis(), early_stop=True)
    assert crashed.verdict is Verdict.RE and len(crashed.tests) == 1


async def test_a_compile_cache_hit_runs_the_cached_binary_without_compiling(sb: Sandbox):
    cache = sb.compile_cache
    assert cache is not None
    program = Program("cpp", CPP_ECHO)
    first = await sb.run(program, [TestCase("21\n", "42\n")])
    assert first.verdict is Verdict.OK and (cache.hits, cache.misses) == (0, 1)
    second = await sb.run(program, [TestCase("5\n", "10\n")])
    assert second.verdict is Verdict.OK and cache.hits == 1
    # Plant the binary of another program under a new source's key: if the runner compiled the
    # source it would print 6; the cached binary doubles its input and prints 4.
    other = Program("cpp", "#include <iostream>\nint main(){int a;std::cin>>a;std::cout<<a*3;}")
    binary = next(iter(cache._entries.values())).binary
    cache.put(CompileCache.key(other, sb._image), Entry(binary))
    planted = await sb.run(other, [TestCase("2\n", "4\n")])
    assert planted.verdict is Verdict.OK


async def test_compile_errors_are_cached_and_returned_without_a_run(sb: Sandbox):
    broken = Program("cpp", "int main( {")
    first = await sb.run(broken, [TestCase("", "")])
    assert first.verdict is Verdict.CE and "error" in first.compile_output
    await sb._backend.aclose()  # a second run must not even reach the backend
    again = await sb.run(broken, [TestCase("", "")])
    assert again.verdict is Verdict.CE and again.compile_output == first.compile_output


async def test_concurrent_identical_programs_all_pass_with_the_cache(sb: Sandbox):
    program = Program("cpp", CPP_ECHO)
    results = await asyncio.gather(
        *(sb.run(program, [TestCase(f"{i}\n", f"{2 * i}\n")]) for i in range(6))
    )
    assert all(r.verdict is Verdict.OK for r in results)


# ---- python -m sandbox verify -----------------------------------------------------------------
def verify(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandbox", "verify", str(path), "--backend", "bubblewrap", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_verify_passes_the_sample_set_and_derives_a_missing_time_limit(tmp_path: Path):
    make_sandbox("bubblewrap")
    shutil.copytree(SAMPLE_SET / "train", tmp_path / "train")
    done = verify(tmp_path / "train", "--write-timelimit")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("addtwo", "divisor", "halve", "hello"):
        assert f"\n{name} (" in done.stdout
    assert "MISMATCH" not in done.stdout
    assert "wrong_answer/underscore.py" in done.stdout  # 500_000.5 is rejected
    assert "time_limit_exceeded/spin.py  TLE" in done.stdout
    assert (tmp_path / "train" / "divisor" / ".timelimit").read_text().strip() == "1"


def test_verify_exits_non_zero_when_a_submission_gets_another_verdict(tmp_path: Path):
    make_sandbox("bubblewrap")
    package = tmp_path / "hello"
    shutil.copytree(SAMPLE_SET / "train" / "hello", package)
    (package / "submissions" / "accepted" / "typo.py").write_text('print("Hello Wordl!")\n')
    done = verify(package)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "accepted/typo.py" in done.stdout and "MISMATCH" in done.stdout
    usage = verify(tmp_path / "nothing-here")
    assert usage.returncode == 2 and "no such directory" in usage.stderr
