"""Runs INSIDE the grading sandbox (after runner_guard.py): sympy's tests as SWE-bench runs them
(`bin/test -C --verbose FILES`), with sympy's own rules for what a test is and how it ends.

ARGS: test files (`sympy/core/tests/test_basic.py`). -C: SYMPY_USE_CACHE=no. For each file, as
sympy.testing.runtests.SymPyTests.test_file does: the file is compiled and executed, its test_*
functions defined in that file (decorators unwrapped, generators expanded) run in source order
with random seeded and sympy's deprecation warnings raised; slow tests are skipped. A test ends
PASSED (returned), FAILED (AssertionError), SKIPPED (Skipped), XFAIL (XFail), XPASS (an @XFAIL
test that passed: not a pass, as SWE-bench's parser never reads `X` as ok) or ERROR. The id is
the function's name, as SWE-bench's sympy log parser reads it. The loop is this file's own, so
the repository's runtests.py decides nothing; statuses reach the host only through
runner_guard's private channel.
"""

import os

GUARDED = ("inspect", "random")
_ORDER = {"PASSED": 0, "XFAIL": 1, "SKIPPED": 2, "XPASS": 3, "FAILED": 4, "ERROR": 5}
_CHARS = {"PASSED": "ok", "XFAIL": "f", "SKIPPED": "s", "XPASS": "X", "FAILED": "F", "ERROR": "E"}
_NAMED = {"Skipped": "SKIPPED", "XFail": "XFAIL", "XPass": "XPASS"}


def _outcome(test, random, raise_on_deprecated):
    """(status, traceback text) of one call, by sympy's rules."""
    import traceback

    try:
        with raise_on_deprecated():
            random.seed(0)
            test()
    except AssertionError:
        return "FAILED", traceback.format_exc()
    except Exception as exc:  # noqa: BLE001 - sympy's outcomes are named classes
        status = _NAMED.get(type(exc).__name__, "ERROR")
        return status, traceback.format_exc() if status == "ERROR" else ""
    return "PASSED", ""


def run(files):
    import contextlib
    import inspect
    import random

    os.environ["SYMPY_USE_CACHE"] = "no"
    try:
        from sympy.testing.runtests import raise_on_deprecated
    except ImportError:
        raise_on_deprecated = contextlib.nullcontext
    from sympy.core.cache import clear_cache

    statuses = {}

    def mark(name, status):
        prior = statuses.get(name)
        if prior is None or _ORDER[status] > _ORDER[prior]:
            statuses[name] = status

    for rel in files:
        filename = os.path.abspath(rel)
        gl = {"__file__": filename}
        with open(filename, encoding="utf8") as fh:
            source = fh.read()
        try:
            exec(compile(source, filename, "exec", dont_inherit=True), gl)
        except Exception:  # noqa: BLE001 - an import error: none of its tests ran
            import traceback

            traceback.print_exc()
            continue
        clear_cache()
        funcs = []
        for name, func in list(gl.items()):
            if name.startswith("test_") and inspect.isfunction(func):
                inner = func
                while hasattr(inner, "__wrapped__"):
                    inner = inner.__wrapped__
                if inspect.getsourcefile(inner) == filename:
                    funcs.append((inspect.getsourcelines(inner)[1], name, func))
        for _, name, func in sorted(funcs):
            tests = [func]
            if inspect.isgeneratorfunction(func):
                tests = [lambda fg=fg: fg[0](*fg[1:]) for fg in func()]
            for test in tests:
                status, trace = "SKIPPED", ""
                if not getattr(func, "_slow", False):
                    status, trace = _outcome(test, random, raise_on_deprecated)
                # bin/test --verbose's line, which SWE-bench's sympy parser reads
                print(f"\n{name} {_CHARS[status]}", flush=True)
                if trace:
                    print(trace, flush=True)
                mark(name, status)
    return statuses


guarded_main(run, GUARDED)  # type: ignore[name-defined]  # noqa: F821 - runner_guard.py, prepended
