"""Judging semantics, verdicts and the public API (pure comparison tests + real backends)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sbtest_util import make_sandbox

from sandbox import (
    JudgeSpec,
    Limits,
    Program,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    TestCase,
    Verdict,
)
from sandbox.judging.judge import compare

A_PLUS_B_PY = Program("python", "a, b = map(int, input().split())\nprint(a + b)\n")
A_PLUS_B_CPP = Program(
    "cpp", '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n'
)


# ---- pure comparison ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("got", "want", "ok"),
    [
        ("1 2\n3\n", "1\n2 3", True),
        ("1  2 3   ", "1 2 3\n\n", True),
        ("1 2", "1 2 3", False),
        ("12", "1 2", False),
        ("", "", True),
    ],
)
def test_token_judge_ignores_whitespace_layout(got: str, want: str, ok: bool) -> None:
    assert compare(got, want, JudgeSpec())[0] is ok


def test_line_judge_is_exact_per_line_except_trailing_space() -> None:
    spec = JudgeSpec(mode="lines")
    assert compare("a b  \nc\n\n", "a b\nc", spec)[0]
    assert not compare("a  b\nc", "a b\nc", spec)[0]
    assert not compare("a b c", "a b\nc", spec)[0]


def test_float_judge_uses_absolute_or_relative_tolerance() -> None:
    spec = JudgeSpec(mode="float", abs_tol=1e-6, rel_tol=1e-6)
    assert compare("0.3333333", "0.33333333333", spec)[0]
    assert compare("1000000.5", "1000000.0", JudgeSpec(mode="float", rel_tol=1e-6))[0]
    assert not compare("0.334", "0.3333333", spec)[0]
    assert not compare("abc 1.0", "abd 1.0", spec)[0]
    # "nan" is not a number to the strict parser: it compares as text (case per case_sensitive)
    assert not compare("nan", "NaN", spec)[0]
    assert compare("nan", "NaN", JudgeSpec(mode="float", case_sensitive=False))[0]


def test_wrong_answer_message_points_at_the_difference() -> None:
    ok, message = compare("1 2 4", "1 2 3", JudgeSpec())
    assert not ok and "token 3" in message


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"time_s": 0}, "time_s"),
        ({"memory_mb": -1}, "memory_mb"),
        ({"wall_time_s": 0}, "wall_time_s"),
    ],
)
def test_bad_limits_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_bad_program_and_judge_spec_are_rejected() -> None:
    with pytest.raises(ValueError, match="python"):
        Program("rust", "fn main(){}")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="checker"):
        JudgeSpec(mode="checker")
    with pytest.raises(ValueError, match="tokens"):
        JudgeSpec(mode="regex")  # type: ignore[arg-type]


def test_unknown_backend_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="bubblewrap"):
        Sandbox.create("firejail")  # type: ignore[arg-type]


def test_unsafe_local_needs_explicit_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(SandboxUnavailable, match="allow_unsafe_local"):
        Sandbox.create("unsafe-local")
    with caplog.at_level(logging.WARNING, logger="sandbox"):
        sb = Sandbox.create("unsafe-local", allow_unsafe_local=True)
    assert sb.backend_name == "unsafe-local"
    assert "NO isolation" in caplog.text


def test_auto_picks_the_strongest_backend_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sandbox"):
        try:
            sb = Sandbox.create("auto", max_concurrency=1)
        except SandboxUnavailable as exc:
            assert "no sandbox backend" in str(exc)
            return
    assert sb.backend_name in ("docker", "bubblewrap", "namespaces")
    assert f"picked {sb.backend_name}" in caplog.text
    asyncio.run(sb.aclose())


# ---- real runs (one backend per test keeps the suite fast; hostile suite covers all) -------
@pytest.fixture(params=["docker", "bubblewrap"])
async def sb(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    sandbox = make_sandbox(request.param)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()


async def test_correct_programs_pass_in_python_and_cpp(sb: Sandbox) -> None:
    tests = [TestCase(f"{i} {i * 7}\n", f"{i * 8}") for i in range(5)]
    for program in (A_PLUS_B_PY, A_PLUS_B_CPP):
        result = await sb.run(program, tests)
        assert result.verdict is Verdict.OK and result.passed == 5 and result.all_passed, result
        assert result.backend == sb.backend_name
        assert all(t.time_s >= 0 and t.memory_mb > 0 for t in result.tests)


async def test_wrong_answer_and_per_test_verdicts(sb: Sandbox) -> None:
    tests = [TestCase("1 2\n", "3"), TestCase("2 2\n", "5"), TestCase("3 3\n", "6")]
    result = await sb.run(A_PLUS_B_PY, tests)
    assert [t.verdict for t in result.tests] == [Verdict.OK, Verdict.WA, Verdict.OK]
    assert result.verdict is Verdict.WA and result.passed == 2 and not result.all_passed


async def test_early_stop_runs_nothing_after_the_first_failure(sb: Sandbox) -> None:
    tests = [TestCase("1 2\n", "3"), TestCase("2 2\n", "5")] + [TestCase("1 1\n", "2")] * 5
    result = await sb.run(A_PLUS_B_PY, tests, early_stop=True)
    assert result.verdict is Verdict.WA
    assert [t.verdict for t in result.tests] == [Verdict.OK, Verdict.WA]


async def test_compile_error_is_ce_with_the_compiler_message(sb: Sandbox) -> None:
    result = await sb.run(Program("cpp", "int main() { return x; }"), [TestCase("", "")])
    assert result.verdict is Verdict.CE and result.tests == ()
    assert "x" in result.compile_output and "error" in result.compile_output
    result = await sb.run(Program("python", "def f(:\n"), [TestCase("", "")])
    assert result.verdict is Verdict.CE and "SyntaxError" in result.compile_output


async def test_runtime_error_and_exit_code(sb: Sandbox) -> None:
    result = await sb.run(Program("python", "import sys\nsys.exit(3)"), [TestCase("", "")])
    assert result.verdict is Verdict.RE and result.tests[0].exit_code == 3
    segv = Program("cpp", "int main(){ volatile int* p = nullptr; return *p; }")
    result = await sb.run(segv, [TestCase("", "")])
    assert result.verdict is Verdict.RE and result.tests[0].exit_code == -11


async def test_expected_none_just_runs_and_returns_stdout(sb: Sandbox) -> None:
    result = await sb.run(Program("python", "print('hello', input())"), [TestCase("world")])
    assert result.verdict is Verdict.OK and result.tests[0].stdout == "hello world\n"


async def test_memory_limit_is_respected_below_and_enforced_above(sb: Sandbox) -> None:
    fits = Program("python", "x = bytearray(40 << 20)\nprint(len(x))")
    assert (await sb.run(fits, [TestCase("")], Limits(memory_mb=128))).verdict is Verdict.OK
    result = await sb.run(fits, [TestCase("")], Limits(memory_mb=40))
    assert result.verdict is Verdict.MLE, result


async def test_checker_program_judges_with_input_output_and_answer(sb: Sandbox) -> None:
    # Accept any pair of numbers summing to the input's target; the answer file holds one.
    checker = Program(
        "python",
        (
            "import sys\n"
            "target = int(open(sys.argv[1]).read())\n"
            "got = list(map(int, open(sys.argv[2]).read().split()))\n"
            "ans = list(map(int, open(sys.argv[3]).read().split()))\n"
            "sys.exit(0 if len(got) == 2 and sum(got) == target == sum(ans) else 1)\n"
        ),
    )
    solver = Program("python", "n = int(input())\nprint(1, n - 1 if n != 7 else 0)")
    tests = [TestCase("10\n", "5 5"), TestCase("7\n", "3 4"), TestCase("3\n", "0 3")]
    result = await sb.run(solver, tests, judge=JudgeSpec(mode="checker", checker=checker))
    assert [t.verdict for t in result.tests] == [Verdict.OK, Verdict.WA, Verdict.OK], result
    assert result.verdict is Verdict.WA


async def test_broken_checker_is_a_system_error_not_wrong_answer(sb: Sandbox) -> None:
    checker = Program("cpp", "this is not C++")
    result = await sb.run(
        A_PLUS_B_PY, [TestCase("1 2\n", "3")], judge=JudgeSpec(mode="checker", checker=checker)
    )
    assert result.verdict is Verdict.SE and "checker" in result.tests[0].message


async def test_concurrent_runs_are_bounded_and_correct(sb: Sandbox) -> None:
    tests = [TestCase(f"{i} 1\n", str(i + 1)) for i in range(3)]
    bad = Program("python", "print(0)")
    results: list[RunResult] = await asyncio.gather(
        *(sb.run(A_PLUS_B_PY if i % 2 == 0 else bad, tests) for i in range(6))
    )
    assert [r.verdict for r in results] == [Verdict.OK, Verdict.WA] * 3


async def test_infrastructure_failure_is_se_never_a_wrong_answer() -> None:
    sb = make_sandbox("docker")
    try:
        assert (await sb.run(A_PLUS_B_PY, [TestCase("1 2\n", "3")])).verdict is Verdict.OK
        # Kill the warm container behind the sandbox's back: the next run must be SE or a
        # clean retry on a fresh container, never WA/RE.
        backend = sb._backend
        for container in list(backend._live.values()):  # type: ignore[attr-defined]
            proc = await asyncio.create_subprocess_exec(
                "docker", "rm", "-f", container.name, stdout=asyncio.subprocess.DEVNULL
            )
            await proc.wait()
        result = await sb.run(A_PLUS_B_PY, [TestCase("1 2\n", "3")])
        assert result.verdict is Verdict.OK, result  # the lost run was retried on a fresh one
        # ... and the broken container was replaced.
        assert (await sb.run(A_PLUS_B_PY, [TestCase("1 2\n", "3")])).verdict is Verdict.OK
    finally:
        await sb.aclose()


def test_config_maps_to_backend_options() -> None:
    from sandbox import SandboxConfig

    cfg = SandboxConfig(
        backend="docker",
        docker_hosts=("ssh://a", "tcp://b:2375"),
        container_memory_mb=1024,
        image_tag="gspo-sandbox:dev",
    )
    assert cfg.backend_options() == {
        "memory_mb": 1024,
        "tmpfs_mb": 256,
        "hosts": ["ssh://a", "tcp://b:2375"],
        "image_tag": "gspo-sandbox:dev",
    }
    local = Sandbox.from_config(SandboxConfig(backend="unsafe-local", allow_unsafe_local=True))
    assert local.backend_name == "unsafe-local" and local.max_concurrency == 4
    with pytest.raises(SandboxUnavailable):
        Sandbox.from_config(SandboxConfig(backend="unsafe-local"))


def test_stale_containers_of_dead_owners_are_reaped_at_start() -> None:
    import socket
    import subprocess

    from sandbox.isolation import image

    asyncio.run(make_sandbox("docker").aclose())  # fail in CI / skip elsewhere if missing
    dead = subprocess.Popen(["true"])
    dead.wait()
    owner = f"{socket.gethostname()}:{dead.pid}"
    started = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--label",
            f"gspo-sandbox.owner={owner}",
            "--network",
            "none",
            image.image_tag(),
            "sleep",
            "300",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = started.stdout.strip()
    sb = make_sandbox("docker")
    try:
        alive = subprocess.run(
            ["docker", "ps", "-aq", "--no-trunc", "--filter", f"id={stale}"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert alive == "", "a container whose owner process is gone must be removed"
    finally:
        asyncio.run(sb.aclose())
        subprocess.run(["docker", "rm", "-f", stale], capture_output=True)
