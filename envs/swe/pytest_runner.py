"""Runs INSIDE the grading sandbox: pytest on the graded tree, outcomes on a nonce-tagged line.

argv: NONCE_FILE BUNDLE_DIR LOG_FILE PYTEST_ARGS... (BUNDLE_DIR "-": the interpreter's own pytest) Started as `python3 -I -B` (no PYTHONPATH,
no user site, no script-dir tricks, no bytecode written) from a clean shell in a session where no
agent process ever ran. The nonce is read from its file and the file unlinked before pytest
imports anything of the repository, so it is in no file, argument or environment variable the
code under test can read. pytest's output and everything the tests print go to LOG_FILE; the
process's original stdout is kept on a private fd and carries exactly one line,
`<nonce> <json {nodeid: status}>`, written after pytest returns; then the process exits with
os._exit so no atexit hook of the code under test runs after it. A run that dies, hangs or
exits early prints no such line, and the host scores it 0.

What this cannot stop: code under test that deliberately searches the interpreter's memory for
the nonce (it runs in the same process as pytest). SWE-bench's own harness parses the printed
log, which any print forges; here a printed line, an exit code, a junit file or a planted
conftest/sitecustomize forges nothing.
"""

import json
import os
import sys


def _status(report, seen):
    """SWE-bench's statuses: PASSED / FAILED / SKIPPED / ERROR / XFAIL, worst phase wins."""
    prior = seen.get(report.nodeid)
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            status = "XFAIL" if report.skipped else "FAILED"  # an XPASS(strict) fails
        else:
            status = report.outcome.upper()
    elif report.failed:
        status = "ERROR"
    elif report.skipped:
        status = "SKIPPED"
    else:
        return prior or "PASSED"
    if prior in ("FAILED", "ERROR"):
        return prior
    return status


# Modules whose functions and classes decide outcomes: every function, class and method in them
# (and in the classes they define) is compared by identity after the run, as are builtins.
_GUARDED = (
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.python",
    "_pytest.main",
    "_pytest.outcomes",
    "_pytest.skipping",
    "_pytest.unittest",
    "_pytest.nodes",
    "_pytest.fixtures",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
    "builtins",
)
# pytest itself replaces these during an ordinary run (measured on pytest 9.0)
_CHANGED_BY_PYTEST = {"_pytest.fixtures.FixtureFunctionMarker.__call__"}


def _guardable(value):
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


def _snapshot():
    """{label: (namespace, key, object)} for every callable or descriptor in the guarded modules
    and in the classes they define, read through __dict__ so descriptors compare as themselves."""
    import importlib

    out = {}
    for module_name in _GUARDED:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        out[f"sys.modules[{module_name}]"] = (sys.modules, module_name, module)
        for key, value in list(vars(module).items()):
            if not _guardable(value):
                continue
            out[f"{module_name}.{key}"] = (module, key, value)
            if isinstance(value, type) and value.__module__ == module_name:
                for attr, member in list(vars(value).items()):
                    label = f"{module_name}.{key}.{attr}"
                    if _guardable(member) and label not in _CHANGED_BY_PYTEST:
                        out[label] = (value, attr, member)
    return out


def _lookup(where, name):
    try:
        return where.get(name) if isinstance(where, dict) else vars(where).get(name)
    except BaseException:  # noqa: BLE001 - an unreadable namespace is a change
        return None


def main():
    dumps, write, exit_now = json.dumps, os.write, os._exit  # before any repository code runs
    nonce_path, bundle, log_path = sys.argv[1:4]
    with open(nonce_path) as fh:
        nonce = fh.read().strip()
    os.unlink(nonce_path)
    channel = os.dup(1)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.dont_write_bytecode = True
    # as `python -m pytest` does: the repository first (-I left the cwd off sys.path), so its
    # package imports without an install; the tree holds only files the grader chose
    sys.path[:0] = [os.getcwd()] + ([bundle] if bundle != "-" else [])  # "-": the env's pytest
    import pytest

    seen = {}
    guarded = _snapshot()

    class Reporter:
        def pytest_runtest_logreport(self, report):
            seen[report.nodeid] = _status(report, seen)

    args = sys.argv[4:] + [
        "--rootdir",
        os.getcwd(),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-rA",
        "-q",
    ]
    try:
        pytest.main(args, plugins=[Reporter()])
    except BaseException:  # noqa: BLE001 - whatever the code did, report what ran so far
        import traceback

        traceback.print_exc()
    tampered = [label for label, (ns, key, obj) in guarded.items() if _lookup(ns, key) is not obj]
    if tampered:  # the code under test replaced part of the test machinery: nothing is trusted
        seen = {"__tampered__": ",".join(tampered[:5])}
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a test may have replaced or closed it
            pass
    line = f"\n{nonce} {dumps(seen)}\n".encode()
    while line:
        line = line[write(channel, line) :]
    exit_now(0)


main()
