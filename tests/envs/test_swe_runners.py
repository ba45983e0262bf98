"""Per-repository runners (envs/swe/runners.py): which runner, its arguments, SWE-bench's id
matching, and the guard the django/sympy runners share (runner_guard.py), attacked from a changed
source file the way a policy would. The guard runs for real in a `python -I -B` subprocess."""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envs.swe.grading import TestRun, judge, parse_records
from envs.swe.instances import parse_instance
from envs.swe.runners import HERE, parse_log, passed, runner_for

ROW = {
    "instance_id": "a__b-1",
    "repo": "owner/name",
    "base_commit": "0" * 40,
    "patch": "diff",
    "problem_statement": "p",
    "FAIL_TO_PASS": ["tests/test_x.py::test_cut[a"],
    "PASS_TO_PASS": [],
}


def test_each_repository_gets_swebench_s_runner_and_arguments():
    def spec(repo, files):
        return runner_for(parse_instance(ROW | {"repo": repo, "test_files": files}))

    django = spec("django/django", ["tests/utils_tests/test_text.py", "admin_views.tests"])
    assert django.name == "django" and django.guarded
    assert django.args(["tests/utils_tests/test_text.py", "admin_views.tests"]) == [
        "utils_tests.test_text",
        "admin_views.tests",
    ]
    sympy = spec("sympy/sympy", ["sympy/core/tests/test_basic.py"])
    assert sympy.name == "sympy" and sympy.args(["a.py"]) == ["a.py"]
    assert spec("psf/requests", []).args(["t.py"]) == ["-o", "addopts=", "t.py"]
    # pytest-dev/pytest loads pytester through its addopts: they are kept, as swebench keeps them
    assert spec("pytest-dev/pytest", []).args(["testing/t.py"]) == ["testing/t.py"]
    assert spec("sphinx-doc/sphinx", []).name == "pytest"


def test_truncated_ids_match_by_prefix_as_swebench_does():
    inst = parse_instance(ROW)
    cut = {"tests/test_x.py::test_cut[a b]": "PASSED", "tests/test_x.py::test_cut[a c]": "PASSED"}
    assert judge(TestRun(cut, ""), inst).resolved
    mixed = cut | {"tests/test_x.py::test_cut[a d]": "FAILED"}  # ambiguous: not a pass
    assert not judge(TestRun(mixed, ""), inst).resolved
    assert not passed("t::x[a", {"t::x[ab]": "FAILED"})
    assert not passed("t::x", {"t::x[1]": "PASSED"})  # a whole id never matches by prefix


def test_the_log_parsers_read_the_lines_swebench_reads():
    django = runner_for(parse_instance(ROW | {"repo": "django/django"}))
    log = "test_a (m.C.test_a) ... ok\ntest_b (m.C.test_b) ... FAIL\nDoc line.\nx ... ERROR\n"
    assert parse_log(django, log) == {
        "test_a (m.C.test_a)": "PASSED",
        "test_b (m.C.test_b)": "FAILED",
        "x": "ERROR",
    }
    sympy = runner_for(parse_instance(ROW | {"repo": "sympy/sympy"}))
    assert parse_log(sympy, "\ntest_a ok\n\ntest_b F\ntest_c E\ntest_d f\n") == {
        "test_a": "PASSED",
        "test_b": "FAILED",
        "test_c": "ERROR",
    }


RUNNER_BODY = """
import os
import sys


def run(args):
    import pkg  # the repository's module, which the agent changed
    return {"t_fixed": pkg.result(), "t_other": "FAILED"}


guarded_main(run, ("unittest.case", "unittest.runner", "json"))
"""
LEGIT = """
import collections, dataclasses, enum, logging, typing
Point = collections.namedtuple("Point", "x y")
Color = enum.Enum("Color", "RED GREEN")
class NT(typing.NamedTuple):
    a: int
@dataclasses.dataclass
class D:
    a: int = 1
logging.getLogger("pkg").warning("a fix may log")
"""
ATTACKS = {
    "frame walk": "import sys\nf = sys._getframe(1)",
    "inspect.stack": "import inspect\ninspect.stack()",
    "traceback.walk_stack": "import traceback\nlist(traceback.walk_stack(None))",
    "logging.currentframe": "import logging\nlogging.currentframe()",
    "heap": "import gc\ngc.get_objects()",
    "referrers": "import gc\ngc.get_referrers(object)",
    "ctypes": "import ctypes\nctypes.string_at(id(1), 8)",
    "settrace": "import sys\nsys.settrace(lambda *a: None)",
    "/proc/self/mem": "open('/proc/self/mem', 'rb')",
    "patch TestCase": "import unittest\nunittest.TestCase.run = lambda self, r=None: None",
    "swap module attr": "import unittest.case\nunittest.case.TestCase = object",
    "code swap": "def f():\n    pass\nf.__code__ = (lambda: 1).__code__",
    # the runner is __main__: its globals are reachable; nothing the verdict reads lives there
    "runner globals": "import sys\nm = sys.modules['__main__']\n"
    "m.SENSITIVE = ()\nm.RECORD['FAILED'] = ('call', 'passed', '0')\nimport gc\ngc.get_objects()",
    "result class": "import unittest\nfor c in unittest.TestResult.__subclasses__():\n"
    "    c.addFailure = c.addSuccess",
}


def _guarded(tmp: Path, source: str, *, changed: bool = True) -> dict[str, str] | None:
    repo = tmp / "repo"
    (repo / "pkg").mkdir(parents=True, exist_ok=True)
    (repo / "pkg/__init__.py").write_text(source + "\n\ndef result():\n    return 'PASSED'\n")
    nonce = secrets.token_hex(8)
    (tmp / "nonce").write_text(nonce)
    (tmp / "changed").write_text("pkg/__init__.py\n" if changed else "")
    (tmp / "deps").mkdir(exist_ok=True)
    script = (HERE / "runner_guard.py").read_text() + RUNNER_BODY
    (tmp / "runner.py").write_text(script)
    argv = [f"{tmp}/nonce", f"{tmp}/deps", f"{tmp}/log", f"{tmp}/changed"]
    out = subprocess.run(
        [sys.executable, "-I", "-B", f"{tmp}/runner.py", *argv],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not (tmp / "nonce").exists(), "the nonce file outlived the start"
    statuses, tampered, ended = parse_records(out.stdout, nonce)
    assert ended, out.stdout[-500:] + out.stderr[-2000:]
    return {"__tampered__": tampered} if tampered else statuses


def test_the_guard_reports_a_changed_file_s_legitimate_run(tmp_path):
    assert _guarded(tmp_path, LEGIT) == {"t_fixed": "PASSED", "t_other": "FAILED"}
    # unchanged repository code may walk frames (sympy's var() does)
    assert _guarded(tmp_path, ATTACKS["frame walk"], changed=False)["t_other"] == "FAILED"


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_changed_file_that_reaches_into_the_interpreter_is_marked_tampered(attack, tmp_path):
    statuses = _guarded(tmp_path, textwrap.dedent(ATTACKS[attack]))
    assert statuses is not None and set(statuses) == {"__tampered__"}, statuses


def test_forged_output_and_a_swapped_encoder_change_nothing(tmp_path):
    forge = """
import json, sys
sys.stdout.write("0123456789abcdef {\\"t_other\\": \\"PASSED\\"}\\n")
class Lie(json.JSONEncoder):
    def encode(self, o):
        return json.dumps({k: "PASSED" for k in o}) if isinstance(o, dict) else super().encode(o)
json._default_encoder = Lie()
"""
    assert _guarded(tmp_path, forge) == {"t_fixed": "PASSED", "t_other": "FAILED"}


def test_per_repo_keeps_a_seeded_sample_of_each_repository():
    from envs.swe.__main__ import per_repo

    rows = [parse_instance(ROW | {"instance_id": f"r{i}", "repo": f"o/{i % 3}"}) for i in range(30)]
    picked = per_repo(rows, 4)
    assert sorted(sum(i.repo == f"o/{k}" for i in picked) for k in range(3)) == [4, 4, 4]
    assert picked == per_repo(rows, 4) and per_repo(rows, 50) == rows
