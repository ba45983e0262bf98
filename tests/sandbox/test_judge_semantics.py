"""Kattis default-validator semantics of the host-side judge, the CLI flags that select them,
and the Kattis package reader (no sandbox needed: pure functions and files)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sandbox.cli import UsageError, _tests_from_dir, judge_of
from sandbox.judging.judge import compare
from sandbox.judging.kattis import (
    PackageError,
    default_validator_spec,
    derive_time_limit,
    find_packages,
    load_package,
    validator_program,
)
from sandbox.types import JudgeSpec

SAMPLE_SET = Path(__file__).resolve().parents[2] / "envs" / "data" / "kattis_sample"


def test_tokens_are_case_sensitive_unless_told_otherwise():
    assert not compare("impossible", "Impossible", JudgeSpec())[0]
    assert compare("impossible", "Impossible", JudgeSpec(case_sensitive=False))[0]
    assert not compare("ÉTÉ", "été", JudgeSpec(case_sensitive=False))[0]  # ASCII folding only


def test_space_change_sensitive_compares_the_whitespace_too():
    spec = JudgeSpec(space_change_sensitive=True)
    assert compare("1 2\n", "1 2\n", spec)[0]
    assert not compare("1  2\n", "1 2\n", spec)[0]
    assert not compare("1 2", "1 2\n", spec)[0]
    assert not compare("1\n2\n", "1 2\n", spec)[0]
    assert compare("1  2", "1 2", JudgeSpec())[0]  # the default ignores spacing


@pytest.mark.parametrize(
    ("got", "want", "ok"),
    [
        ("1_0", "10", False),  # Python's float() reads 1_0 as 10
        ("inf", "1e999", False),
        ("nan", "0.5", False),
        ("0x10", "16", False),
        ("1e1", "10", True),
        (".5", "0.5", True),
        ("5.", "5", True),
        ("-0", "0", True),
        ("+1.0000001", "1", True),
        ("1.001", "1", False),
        ("nan", "nan", True),  # not numbers: compared as text
        ("NaN", "nan", False),
    ],
)
def test_float_mode_parses_numbers_strictly(got: str, want: str, ok: bool):
    assert compare(got, want, JudgeSpec(mode="float"))[0] is ok


def test_float_tolerances_absolute_or_relative():
    absolute = JudgeSpec(mode="float", abs_tol=0.1, rel_tol=0.0)
    assert compare("1000.05", "1000", absolute)[0]
    assert not compare("1000.5", "1000", absolute)[0]
    relative = JudgeSpec(mode="float", abs_tol=0.0, rel_tol=1e-3)
    assert compare("1000.5", "1000", relative)[0]
    assert not compare("0.0015", "0.001", relative)[0]


def test_float_mode_compares_words_case_insensitively_when_asked():
    spec = JudgeSpec(mode="float", case_sensitive=False)
    assert compare("YES 0.5", "yes 0.50000001", spec)[0]


def test_judge_spec_rejects_a_negative_tolerance_and_unknown_protocol():
    with pytest.raises(ValueError, match="abs_tol"):
        JudgeSpec(mode="float", abs_tol=-1)
    with pytest.raises(ValueError, match="checker_protocol"):
        JudgeSpec(checker_protocol="icpc")  # type: ignore[arg-type]


def test_default_validator_flags_map_to_judge_options():
    assert default_validator_spec([]) == JudgeSpec(case_sensitive=False)
    spec = default_validator_spec(["case_sensitive", "float_tolerance", "1e-4"])
    assert (spec.mode, spec.case_sensitive, spec.abs_tol, spec.rel_tol) == (
        "float",
        True,
        1e-4,
        1e-4,
    )
    spec = default_validator_spec(["float_absolute_tolerance", "0.5", "space_change_sensitive"])
    assert (spec.abs_tol, spec.rel_tol, spec.space_change_sensitive) == (0.5, 0.0, True)
    with pytest.raises(PackageError, match="needs a number"):
        default_validator_spec(["float_relative_tolerance"])
    with pytest.raises(PackageError, match="unknown default-validator flag"):
        default_validator_spec(["case_insensitive"])


def _judge_args(**overrides) -> argparse.Namespace:
    base = dict(
        checker=None,
        checker_protocol=None,
        validator_flags="",
        case_insensitive=False,
        space_change_sensitive=False,
        float_tolerance=None,
        float_absolute_tolerance=None,
        float_relative_tolerance=None,
        mode="tokens",
    )
    return argparse.Namespace(**{**base, **overrides})


def test_cli_flags_build_the_judge_spec():
    spec = judge_of(_judge_args(case_insensitive=True, float_absolute_tolerance=1e-3))
    assert (spec.mode, spec.case_sensitive, spec.abs_tol, spec.rel_tol) == ("float", False, 1e-3, 0)
    assert judge_of(_judge_args()) == JudgeSpec()
    with pytest.raises(UsageError, match="float tolerance"):
        judge_of(_judge_args(mode="lines", float_tolerance=1e-6))
    validator = SAMPLE_SET / "train" / "divisor" / "output_validators" / "divisor_validator"
    spec = judge_of(_judge_args(checker=validator, validator_flags="a b"))
    assert (spec.mode, spec.checker_protocol, spec.checker_args) == (
        "checker",
        "kattis",
        ("a", "b"),
    )


# ---- the package reader ----------------------------------------------------------------------
def test_the_sample_set_reads_with_each_time_limit_source():
    packages = {p.name: load_package(p) for p in find_packages(SAMPLE_SET / "train")}
    assert sorted(packages) == ["addtwo", "divisor", "halve", "hello"]
    assert packages["hello"].time_limit_s == 1.0  # .timelimit
    assert packages["addtwo"].time_limit_s == 1.0  # domjudge-problem.ini
    assert packages["divisor"].time_limit_s is None  # only time_multiplier
    assert packages["divisor"].time_multiplier == 3.0
    assert packages["addtwo"].memory_mb == 256
    maximum = load_package(SAMPLE_SET / "test" / "maximum")
    assert maximum.time_limit_s == 1.0  # limits.time_limit
    assert [t.expected for t in maximum.secret] == ["-7\n", "9\n"]  # nested groups, in order
    assert derive_time_limit(packages["divisor"], 0.4).time_limit_s == 2.0  # ceil(0.4 * 3)


def test_package_judges_come_from_flags_and_validators():
    halve = load_package(SAMPLE_SET / "train" / "halve")
    assert (halve.judge.mode, halve.judge.abs_tol, halve.judge.case_sensitive) == (
        "float",
        1e-6,
        False,
    )
    divisor = load_package(SAMPLE_SET / "train" / "divisor")
    assert divisor.judge.checker_protocol == "kattis"
    assert divisor.judge.checker_args == ("case_insensitive_none",)  # data/testdata.yaml
    source = divisor.judge.checker.source  # type: ignore[union-attr]
    assert "namespace validate" in source and '#include "validate.h"' not in source
    categories = {s.category for s in load_package(SAMPLE_SET / "train" / "addtwo").submissions}
    assert categories == {"accepted", "wrong_answer", "time_limit_exceeded", "run_time_error"}


def _package(root: Path, yaml: str = "name: T\n") -> Path:
    (root / "data" / "secret").mkdir(parents=True)
    (root / "problem.yaml").write_text(yaml)
    (root / "data" / "secret" / "1.in").write_text("1\n")
    (root / "data" / "secret" / "1.ans").write_text("1\n")
    return root


def test_bad_packages_fail_with_the_file_and_the_fix(tmp_path: Path):
    interactive = _package(tmp_path / "inter", "validation: custom interactive\n")
    with pytest.raises(PackageError, match="interactive"):
        load_package(interactive)
    missing = _package(tmp_path / "noans")
    (missing / "data" / "secret" / "2.in").write_text("2\n")
    with pytest.raises(PackageError, match="2.ans"):
        load_package(missing)
    bad_limit = _package(tmp_path / "badlimit")
    (bad_limit / ".timelimit").write_text("fast\n")
    with pytest.raises(PackageError, match="not a number"):
        load_package(bad_limit)
    with pytest.raises(PackageError, match="neither a problem package"):
        find_packages(tmp_path / "inter" / "data")
    custom = _package(tmp_path / "custom", "validation: custom\n")
    with pytest.raises(PackageError, match="output_validators"):
        load_package(custom)


def test_headers_are_inlined_once_and_validators_need_sources(tmp_path: Path):
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "a.h").write_text('#pragma once\n#include "b.h"\nint a;\n')
    (tmp_path / "v" / "b.h").write_text("int b;\n")
    (tmp_path / "v" / "main.cpp").write_text('#include "a.h"\n#include "b.h"\n#include <cstdio>\n')
    source = validator_program(tmp_path / "v").source
    assert source.count("int b;") == 1 and "int a;" in source and "#include <cstdio>" in source
    (tmp_path / "empty").mkdir()
    with pytest.raises(PackageError, match="C\\+\\+ sources"):
        validator_program(tmp_path / "empty")


def test_judge_tests_dir_looks_into_sample_and_secret():
    rows = _tests_from_dir(SAMPLE_SET / "test" / "maximum")
    assert [r["name"] for r in rows] == ["sample/1", "secret/group1/1", "secret/group2/1"]
    assert rows[0]["expected"] == "5\n"
    rows = _tests_from_dir(SAMPLE_SET / "test" / "maximum" / "data")
    assert len(rows) == 3
