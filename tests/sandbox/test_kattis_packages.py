"""Kattis packages as Kattis reads them, judged for real (`python -m sandbox verify` / `judge`
in bubblewrap; under CI=true a missing backend fails): a validator that is several programs
(build/run scripts, two sources with a main each) built and run; a validator that cannot be
built refuses the package; .py3 and every standard submission folder judged; validator feedback
shown; a time limit never derived from failed runs; testdata.yaml flags per test group.
Every package here is written by the test (no contest data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sbtest_util import make_sandbox
from test_sandbox_cli import cli

from envs.codeforces.loaders import load_source
from envs.errors import TaskError
from sandbox.judging.kattis import PackageError, load_package

# The validator: check.cpp (main) + lib.cpp (a separate translation unit: its `static` helper
# has the same name as check.cpp's, so joining the files into one would not compile) + tool.cpp
# (a second main the build script does not build). Accepts |team - answer| <= slack().
CHECK_CPP = r"""#include <cstdio>
#include <cstdlib>
#include <string>
int slack();
static int helper() { return 0; }
int main(int argc, char** argv) {
    FILE* ans = std::fopen(argv[2], "r");
    long long want, got;
    if (std::fscanf(ans, "%lld", &want) != 1) return 1;
    if (std::scanf("%lld", &got) != 1) return 43 + helper();
    long long off = got > want ? got - want : want - got;
    if (off <= slack()) return 42;
    FILE* msg = std::fopen((std::string(argv[3]) + "judgemessage.txt").c_str(), "w");
    std::fprintf(msg, "off by %lld (slack %d)\n", off, slack());
    std::fclose(msg);
    return 43;
}
"""
LIB_CPP = "static int helper() { return 1; }\nint slack() { return helper(); }\n"
TOOL_CPP = "int main() { return 7; }\n"
BUILD = "#!/bin/sh\nset -e\ng++ -O2 -o check check.cpp lib.cpp\n"
RUN = '#!/bin/sh\nexec "$(dirname "$0")/check" "$@"\n'

SUBMISSIONS = {
    "accepted/exact.py": "print(int(input()) * 2)\n",
    "accepted/close.py3": "print(int(input()) * 2 + 1)\n",  # within the slack: Kattis's .py3
    "accepted/exact.cc": "#include <iostream>\nint main(){long long n;std::cin>>n;std::cout<<2*n;}\n",
    "wrong_answer/far.py": "print(int(input()) * 2 + 5)\n",
    "run_time_error/crash.py": "raise SystemExit(3)\n",
    "time_limit_exceeded/spin.py": "while True:\n    pass\n",
    "memory_limit_exceeded/hog.py": "x = bytearray(600 << 20)\nx[::4096] = b'1' * len(x[::4096])\n",
    "output_limit/flood.py": "import sys\nsys.stdout.write('7' * (3 << 20))\n",
    "compiler_error/broken.cpp": "int main( {\n",
    "rejected/zero.py": "print(0)\n",
    "mixed/slow_or_wrong.py": "# @EXPECTED_RESULTS@: WRONG-ANSWER, TIMELIMIT\nprint(-1)\n",
    "brute_force/brute.py": "while True:\n    pass\n",
    "partially_accepted/part.py": "print(0)\n",
    "accepted/Main.java": "class Main {}\n",
    "accepted/old.py": "#!/usr/bin/env python2\nprint 2\n",
}


def write_package(root: Path, *, build: str = BUILD, timelimit: str | None = "1") -> Path:
    pkg = root / "doubling"
    (pkg / "data" / "sample").mkdir(parents=True)
    (pkg / "data" / "secret").mkdir(parents=True)
    (pkg / "problem.yaml").write_text(
        "name: Doubling\nvalidation: custom\nlimits:\n  memory: 256\n  time_multiplier: 2\n"
    )
    if timelimit is not None:
        (pkg / ".timelimit").write_text(timelimit + "\n")
    for part, n in (("sample", 1), ("secret", 20), ("secret", 300)):
        (pkg / "data" / part / f"{n}.in").write_text(f"{n}\n")
        (pkg / "data" / part / f"{n}.ans").write_text(f"{2 * n}\n")
    validator = pkg / "output_validators" / "slack"
    validator.mkdir(parents=True)
    for name, text in (("check.cpp", CHECK_CPP), ("lib.cpp", LIB_CPP), ("tool.cpp", TOOL_CPP)):
        (validator / name).write_text(text)
    for name, text in (("build", build), ("run", RUN)):
        (validator / name).write_text(text)
        os.chmod(validator / name, 0o755)
    return pkg


def add_submissions(pkg: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = pkg / "submissions" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    make_sandbox("bubblewrap")  # fail (CI) / skip elsewhere, with the reason


def table_row(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line.strip().startswith(name))


@pytest.mark.parametrize("backend", ["docker", "bubblewrap"])
def test_multi_program_validator_and_every_submission_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    make_sandbox(backend)
    monkeypatch.setenv("GSPO_COMPILE_CACHE_DIR", str(tmp_path / "cache"))  # built on `backend`
    pkg = write_package(tmp_path)
    add_submissions(pkg, SUBMISSIONS)
    done = cli("verify", str(pkg), "--backend", backend)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for name in (
        "accepted/exact.py", "accepted/close.py3", "accepted/exact.cc", "wrong_answer/far.py",
        "run_time_error/crash.py", "time_limit_exceeded/spin.py", "memory_limit_exceeded/hog.py",
        "output_limit/flood.py", "compiler_error/broken.cpp", "rejected/zero.py",
        "mixed/slow_or_wrong.py", "brute_force/brute.py",
    ):  # fmt: skip
        assert table_row(out, name).endswith("ok"), (name, out)
    assert " OK " in table_row(out, "accepted/close.py3")  # judged, and accepted by the slack
    assert " WA " in table_row(out, "mixed/slow_or_wrong.py")
    assert "WA/TLE" in table_row(out, "mixed/slow_or_wrong.py")
    assert "not OK" in table_row(out, "rejected/zero.py")
    assert " CE " in table_row(out, "compiler_error/broken.cpp")
    for name, why in (
        ("partially_accepted/part.py", "scoring"),
        ("accepted/Main.java", ".java"),
        ("accepted/old.py", "Python 2"),
    ):
        assert why in table_row(out, name) and "skipped: " in table_row(out, name)
    lines = out.splitlines()
    far = lines.index(table_row(out, "wrong_answer/far.py"))
    assert "judgemessage.txt: off by 5 (slack 1)" in lines[far + 1]  # the validator's feedback
    crash = lines.index(table_row(out, "run_time_error/crash.py"))
    assert "exit code 3" in lines[crash + 1]


def test_a_validator_that_cannot_be_built_refuses_the_package(tmp_path: Path) -> None:
    broken = "#!/bin/sh\necho 'no rule to make check' >&2\nexit 2\n"
    pkg = write_package(tmp_path, build=broken)
    add_submissions(pkg, {"accepted/exact.py": SUBMISSIONS["accepted/exact.py"]})
    with pytest.raises(
        PackageError, match="(?s)cannot be built.*exited with 2.*no rule to make check"
    ):
        load_package(pkg, backend="bubblewrap")
    done = cli("verify", str(pkg), "--backend", "bubblewrap")
    assert done.returncode == 2 and "cannot be built" in done.stderr
    assert "SE" not in done.stdout
    with pytest.raises(TaskError, match="cannot be built"):
        load_source(f"kattis:{pkg}", "train", split_mode="all")


def test_time_limit_is_derived_only_from_passing_accepted_runs(tmp_path: Path) -> None:
    pkg = write_package(tmp_path, timelimit=None)
    slow_and_wrong = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.6:\n    pass\nprint(0)\n"
    add_submissions(
        pkg,
        {"accepted/exact.py": SUBMISSIONS["accepted/exact.py"], "accepted/slow.py": slow_and_wrong},
    )
    done = cli("verify", str(pkg), "--backend", "bubblewrap")
    out = done.stdout
    # From the failed run it would be ceil(1.6 x 2) = 4 s; from the passing one, 1 s.
    assert "accepted submissions that fail, not timed: slow.py" in out
    assert "time limit derived: slowest accepted" in out and "= 1s" in out, out
    assert done.returncode == 1 and table_row(out, "accepted/slow.py").endswith("MISMATCH")
    (pkg / "submissions" / "accepted" / "exact.py").unlink()
    none_pass = cli("verify", str(pkg), "--backend", "bubblewrap")
    assert none_pass.returncode == 2
    assert "no accepted submission passes" in none_pass.stderr


def write_flag_package(root: Path) -> Path:
    pkg = root / "flags"
    data = pkg / "data"
    for group in ("sample", "secret/g1", "secret/g2"):
        (data / group).mkdir(parents=True)
        (data / group / "1.in").write_text("x\n")
        (data / group / "1.ans").write_text("yes 1.0\n")
    (pkg / "problem.yaml").write_text("name: Flags\nvalidator_flags: float_tolerance 0.1\n")
    (data / "secret" / "testdata.yaml").write_text("output_validator_flags: case_sensitive\n")
    (data / "secret" / "g2" / "testdata.yaml").write_text(
        "output_validator_flags: space_change_sensitive\n"
    )
    return pkg


def test_testdata_yaml_flags_per_group_inherited_and_combined(tmp_path: Path) -> None:
    package = load_package(write_flag_package(tmp_path))
    sample, g1, g2 = package.test_judges
    assert package.test_names == ("sample/1", "secret/g1/1", "secret/g2/1")
    # Samples: only problem.yaml's flags (data/secret's testdata.yaml is not theirs).
    assert (sample.mode, sample.abs_tol, sample.case_sensitive) == ("float", 0.1, False)
    # secret/g1 inherits secret's case_sensitive, combined with problem.yaml's tolerance.
    assert (g1.mode, g1.abs_tol, g1.case_sensitive) == ("float", 0.1, True)
    # secret/g2 sets its own flags: secret's are not inherited there; problem.yaml's still hold.
    assert (g2.mode, g2.case_sensitive, g2.space_change_sensitive) == ("float", False, True)
    assert [len(i) for _, i in package.judge_runs()] == [1, 1, 1]


def test_judge_tests_pkg_honours_the_package_flags(tmp_path: Path) -> None:
    pkg = write_flag_package(tmp_path)
    shout = tmp_path / "shout.py"
    shout.write_text("print('YES 1.05')\n")
    done = cli("judge", str(shout), "--tests", str(pkg), "--backend", "bubblewrap")
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "own validator and flags" in lines[0]
    assert "has no time limit; using 2 s" in lines[1]
    assert table_row(done.stdout, "test sample/1:").startswith("test sample/1: OK")  # tolerance
    assert table_row(done.stdout, "test secret/g1/1:").startswith("test secret/g1/1: WA")  # case
    assert table_row(done.stdout, "test secret/g2/1:").startswith("test secret/g2/1: OK")
    override = cli(
        "judge", str(shout), "--tests", str(pkg), "--backend", "bubblewrap", "--case-insensitive",
        "--float-tolerance", "0.1",
    )  # fmt: skip
    assert override.returncode == 0, override.stdout


def test_a_package_with_different_group_flags_is_refused_for_training(tmp_path: Path) -> None:
    pkg = write_flag_package(tmp_path)
    with pytest.raises(TaskError, match="test groups use different validator flags"):
        load_source(f"kattis:{pkg}", "train", split_mode="all")


async def test_a_validator_builds_beside_a_live_sandbox_of_the_same_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox import Program, TestCase, Verdict
    from sandbox.judging import compile_cache

    monkeypatch.setattr(compile_cache, "_shared", compile_cache.CompileCache())  # no cached build
    live = make_sandbox("bubblewrap")
    try:
        assert (await live.run(Program("python", "print(1)"), [TestCase("")])).verdict is Verdict.OK
        package = load_package(write_package(tmp_path), backend="bubblewrap")  # builds now
        tests = list(package.tests)
        result = await live.run(
            Program("python", "print(int(input()) * 2 + 1)"), tests, judge=package.judge
        )
        assert result.verdict is Verdict.OK  # within the validator's slack
    finally:
        await live.aclose()
