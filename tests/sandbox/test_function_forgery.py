"""Function-style results cannot be forged (SANDBOX.md item 15), on every isolating backend.

Every submission below answers the test wrongly (it returns 0, or never returns, for a test that
expects 42) and tries to turn that into OK: printing any result marker to any stdout it can
find, exiting 0 at import or inside the function, replacing the harness's functions, raising or
exiting in __del__, closing and dup'ing fds, signalling or reading the trusted parent, returning
an object whose __eq__ always says yes, and planting modules or a replaced main.py for later
tests. None may yield OK. After each case the same slot (max_concurrency=1: the same uid, the same
warm container) judges an honest submission correctly: one test OK, one WA.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sbtest_util import ISOLATING_BACKENDS, make_sandbox

from sandbox import JudgeSpec, Limits, Sandbox, Verdict
from sandbox.judging.functional import function_call

LIMITS = Limits(time_s=2, wall_time_s=10)
WRONG = [{"args": [41], "expected": 42}]  # every forger below returns something else

FORGERS = {
    "marker_at_import_then_exit0": """
import sys, os
for line in ("OK", "__gspo_result__ 42", "x OK", "42"):
    sys.__stdout__.write(line + "\\n"); sys.stdout.write(line + "\\n")
sys.__stdout__.flush(); sys.stdout.flush()
os.write(1, b"OK\\n")
sys.exit(0)
def f(x): return 0
""",
    "marker_in_function_then_os_exit0": """
import sys, os
def f(x):
    for out in (sys.__stdout__, sys.stdout, "/dev/stdout", "/proc/self/fd/1"):
        try:
            out = open(out, "w") if isinstance(out, str) else out
            out.write("OK\\n42\\n__gspo_result__ 42\\n"); out.flush()
        except OSError:
            pass
    os._exit(0)
""",
    "sys_exit0_in_function": "def f(x):\n    raise SystemExit(0)\n",
    "os_exit0_at_import": "import os\nos._exit(0)\ndef f(x): return 42\n",
    "parent_fds_and_memory": """
import os, glob
def f(x):
    ppid = os.getppid()
    for path in [f"/proc/{ppid}/fd/1", f"/proc/{ppid}/fd/0", "/proc/1/fd/1"]:
        try:
            with open(path, "w") as fh:
                fh.write("OK\\n")
        except OSError:
            pass
    for path in [f"/proc/{ppid}/mem", f"/proc/{ppid}/environ", f"/proc/{ppid}/fd/0", ".stdin"]:
        try:
            with open(path, "rb") as fh:
                data = fh.read(1 << 16)
        except OSError:
            continue
        if b"nonce" in data or b"expected" in data:
            return 42  # leaked: a pass here means the payload reached the child
    for path in glob.glob("/tmp/**/.stdin", recursive=True):
        if b"expected" in open(path, "rb").read():
            return 42
    return 0
""",
    "replace_harness_functions_and_fake_frames": """
import __main__, json, os
for name in ("values_equal", "_verdict", "judge", "decode", "_call", "encode"):
    if hasattr(__main__, name):
        setattr(__main__, name, lambda *a, **k: True)
FAKE = [{"ready": True}, {"ok": True}, {"verdict": "OK"}, {"value": True}, {"raised": "OK"}]
def f(x):
    for fd in range(3, 16):  # whichever is the reply pipe: fake replies, then a bogus length
        for msg in FAKE:
            data = json.dumps(msg).encode()
            try:
                os.write(fd, len(data).to_bytes(4, "big") + data)
            except OSError:
                pass
        try:
            os.write(fd, (1 << 31).to_bytes(4, "big"))
        except OSError:
            pass
    return 0
""",
    "del_raises_and_exits": """
import os, sys
class Boom:
    def __del__(self):
        sys.__stdout__.write("OK\\n"); sys.__stdout__.flush()
        os._exit(0)
keep = Boom()
def f(x):
    b = Boom()
    raise RuntimeError("after making a Boom")
""",
    "close_and_dup_fds": """
import os
def f(x):
    for fd in range(3, 64):
        try:
            os.dup2(2, fd)
        except OSError:
            pass
    os.closerange(0, 1)
    return 0
""",
    "always_equal_object": """
class Yes(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
class Anything:
    def __eq__(self, other): return True
    def tolist(self): return 0
def f(x):
    return Yes(0) if x == 41 else Anything()
""",
    "signal_the_parent": """
import os, signal
def f(x):
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGALRM):
        os.kill(os.getppid(), sig)
    os.kill(os.getppid(), signal.SIGKILL)
    return 0
""",
    "ptrace_the_parent": """
import ctypes, os
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    PTRACE_ATTACH = 16
    if libc.ptrace(PTRACE_ATTACH, os.getppid(), 0, 0) == 0:
        return 42  # attached: the parent is not protected
    return 0
""",
}


@pytest.fixture(params=ISOLATING_BACKENDS)
async def one_slot(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    sb = make_sandbox(request.param, concurrency=1)
    try:
        yield sb
    finally:
        await sb.aclose()


HONEST = """
import glob, os
def leftovers():
    mine = {1, os.getpid(), os.getppid()}
    found = [f"pid {p}" for p in os.listdir("/proc") if p.isdigit() and int(p) not in mine]
    for pattern in ("/tmp/*.py", "/tmp/**/*.py", os.path.expanduser("~/*.py"), "../*.py"):
        found += [p for p in glob.glob(pattern, recursive=True) if not p.endswith("main.py")]
    return found
def f(x):
    return leftovers() or x + 1
"""


async def next_run_is_clean(sb: Sandbox) -> None:
    """The same slot judges an honest submission exactly as a fresh one would, and it sees no
    process or planted module of the run before."""
    cases = [{"args": [41], "expected": 42}, {"args": [1], "expected": 3}]
    result = await sb.run(*function_call(HONEST, "f", cases), LIMITS)
    assert [t.verdict for t in result.tests] == [Verdict.OK, Verdict.WA], result


@pytest.mark.parametrize("case", sorted(FORGERS))
async def test_function_results_cannot_be_forged(one_slot: Sandbox, case: str) -> None:
    result = await one_slot.run(*function_call(FORGERS[case], "f", WRONG), LIMITS)
    assert result.verdict is not Verdict.OK, result
    assert result.verdict in (Verdict.WA, Verdict.RE, Verdict.TLE), result
    await next_run_is_clean(one_slot)


CHECK_SWALLOWS = """
def check(candidate):
    try:
        candidate(41)
    except BaseException:
        pass
    try:
        assert candidate(41) == 42
    except BaseException:
        pass
"""


async def test_check_code_cannot_swallow_a_dead_submission(one_slot: Sandbox) -> None:
    """A test whose try/except would swallow anything: the submission exiting is still RE."""
    for source in (
        "import os\ndef f(x):\n    os._exit(0)\n",
        "def f(x):\n    raise SystemExit(0)\n",
    ):
        program, tests = function_call(source, "f", [{"check": CHECK_SWALLOWS}])
        result = await one_slot.run(program, tests, LIMITS)
        if "SystemExit" in source:  # an exception the test caught: the test passes, rightly
            assert result.verdict is Verdict.OK, result
        else:
            assert result.verdict is Verdict.RE, result
    await next_run_is_clean(one_slot)


PLANTER = """
import os, sys
MODULES = ("json", "signal", "traceback", "types", "ctypes", "sitecustomize", "usercustomize")
FORGE = 'import sys, os\\nsys.stdout.write(open("/proc/self/cmdline").read()[:0] + "OK\\\\n")\\n'
def f(x):
    here = os.getcwd()
    for d in (here, os.path.dirname(here), "/tmp", os.environ.get("HOME", "/tmp")):
        for name in MODULES:
            try:
                with open(os.path.join(d, name + ".py"), "w") as fh:
                    fh.write(FORGE + "os._exit(0)\\n")
            except OSError:
                pass
    try:  # replace the submission later tests of this run load
        with open(os.path.join(os.path.dirname(here), "main.py"), "w") as fh:
            fh.write("import os, sys\\nsys.__stdout__.write('OK\\\\n')\\nos._exit(0)\\n")
    except OSError:
        pass
    return 0
"""


async def test_planted_modules_and_replaced_source_do_not_reach_later_tests(
    one_slot: Sandbox,
) -> None:
    cases = [{"args": [41], "expected": 42}] * 3
    result = await one_slot.run(*function_call(PLANTER, "f", cases), LIMITS)
    assert all(t.verdict is not Verdict.OK for t in result.tests), result
    await next_run_is_clean(one_slot)


async def test_a_busy_child_is_tle_and_its_cpu_counts(one_slot: Sandbox) -> None:
    source = "def f(x):\n    while True:\n        pass\n"
    limits = Limits(time_s=0.5, wall_time_s=20)
    result = await one_slot.run(*function_call(source, "f", WRONG), limits)
    assert result.verdict is Verdict.TLE, result
    assert result.tests[0].time_s >= 0.5, result
    await next_run_is_clean(one_slot)


async def test_function_style_verdicts(one_slot: Sandbox) -> None:
    """Honest submissions: values, exceptions, syntax errors, HumanEval and MBPP tests."""
    source = (
        "def f(x):\n    print('debug')\n    return {'pair': (x, x), 'set': {x}, 1: [x]}\n"
        "def boom(x):\n    raise ValueError('no')\n"
        "class Solution:\n    def twice(self, x):\n        return x * 2\n"
    )
    expected = {"pair": [1, 1], "set": {1}, 1: (1,)}
    program, tests = function_call(
        source, "f", [{"args": [1], "expected": expected}, {"args": [2], "expected": expected}]
    )
    result = await one_slot.run(program, tests, LIMITS)
    assert [t.verdict for t in result.tests] == [Verdict.OK, Verdict.WA], result
    assert "debug" in result.tests[0].stderr and "expected" in result.tests[1].stderr
    result = await one_slot.run(*function_call(source, "boom", [{"args": [1]}]), LIMITS)
    assert result.verdict is Verdict.RE and "ValueError" in result.tests[0].stderr, result
    result = await one_slot.run(
        *function_call(source, "Solution.twice", [{"kwargs": {"x": 4}, "expected": 8}])
    )
    assert result.verdict is Verdict.OK, result
    result = await one_slot.run(*function_call("def f(x) return", "f", WRONG), LIMITS)
    assert result.verdict is Verdict.CE, result
    humaneval = (
        "def check(candidate):\n"
        "    assert candidate(3) == 6\n"
        "    assert candidate(-1) == -2\n"
        "    try:\n        candidate('x' * 0 or None)\n    except TypeError:\n        pass\n"
    )
    mbpp = "assert twice(2) == 4\nassert candidate(5) == 10\n"
    cases = [{"check": humaneval}, {"check": mbpp}, {"check": "assert twice(2) == 5"}]
    result = await one_slot.run(*function_call(source, "Solution.twice", cases), LIMITS)
    assert [t.verdict for t in result.tests] == [Verdict.OK, Verdict.OK, Verdict.WA], result
    await next_run_is_clean(one_slot)


async def test_values_compare_as_python_not_as_json(one_slot: Sandbox) -> None:
    """The problem list's cases: 1.0 vs 1 and True vs 1 were WA, {1: "a"} vs {"1": "a"} was
    OK and a returned set was RE under canonical-JSON comparison."""
    source = (
        "def one_float(): return 1.0\n"
        "def true(): return True\n"
        "def int_keys(): return {1: 'a'}\n"
        "def a_set(): return {3, 1, 2}\n"
    )
    checks = [
        ("one_float", 1, Verdict.OK),
        ("true", 1, Verdict.OK),
        ("int_keys", {"1": "a"}, Verdict.WA),
        ("int_keys", {1: "a"}, Verdict.OK),
        ("a_set", {1, 2, 3}, Verdict.OK),
        ("a_set", [1, 2, 3], Verdict.WA),
    ]
    for name, expected, verdict in checks:
        result = await one_slot.run(
            *function_call(source, name, [{"args": [], "expected": expected}]), LIMITS
        )
        assert result.verdict is verdict, (name, expected, result)
    tolerant = [{"args": [], "expected": 1.0000001, "abs_tol": 1e-6}, {"args": [], "expected": 1.1}]
    result = await one_slot.run(*function_call(source, "one_float", tolerant), LIMITS)
    assert [t.verdict for t in result.tests] == [Verdict.OK, Verdict.WA], result
    float_judge = JudgeSpec(mode="float", abs_tol=1e-3, rel_tol=0)
    result = await one_slot.run(
        *function_call(source, "one_float", [{"args": [], "expected": 1.0005}]), LIMITS, float_judge
    )
    assert result.verdict is Verdict.OK, result
