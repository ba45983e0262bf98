"""Runs INSIDE the grading sandbox (after runner_guard.py): Django's own test runner, as
SWE-bench runs it (`tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 LABELS`).

ARGS: test labels (`utils_tests.test_text`, as SWE-bench derives them from test file paths).
tests/runtests.py is the instance's (a test path: never taken from the agent); its
setup_run_tests configures the apps and settings, then DiscoverRunner runs the labels with this
file's result class, which records each test's status under the name SWE-bench's Django log
parser reads from the verbose line: the text before ` ... ` (`test_x (module.Class.test_x)`, or
the first docstring line when the test has one) and, when that differs, `str(test)` too. The
statuses reach the host only through runner_guard's private channel; nothing printed counts.
"""

import os
import sys

GUARDED = (
    "unittest.case",
    "unittest.result",
    "unittest.suite",
    "unittest.runner",
    "unittest.loader",
)


def _set_up(runtests, labels):
    """The apps and settings of runtests.py: setup_run_tests (Django 4.0+) or setup (before; its
    arguments by name, as they changed between versions). Returns the labels to run."""
    import inspect

    if hasattr(runtests, "setup_run_tests"):
        return runtests.setup_run_tests(2, None, None, labels)[0] or labels
    known = {"verbosity": 2, "test_labels": labels, "parallel": 1}
    known |= {"start_at": None, "start_after": None}
    names = inspect.signature(runtests.setup).parameters
    runtests.setup(**{n: known[n] for n in names if n in known})
    return labels


def run(labels):
    import unittest

    os.environ["DJANGO_SETTINGS_MODULE"] = "test_sqlite"
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    import runtests  # the instance's tests/runtests.py
    from django.test.runner import DiscoverRunner

    class Result(unittest.TextTestResult):
        """Records on the instance (reachable only through frames, which the guard watches),
        never in a closure: the class itself is reachable (TextTestResult.__subclasses__())."""

        order = {"PASSED": 0, "XFAIL": 1, "SKIPPED": 2, "FAILED": 3, "ERROR": 4}

        def mark(self, test, status):
            statuses = self.__dict__.setdefault("gspo_statuses", {})
            doc = test.shortDescription() if hasattr(test, "shortDescription") else None
            for name in {str(test), doc} - {None, ""}:
                prior = statuses.get(name)
                if prior is None or self.order[status] > self.order[prior]:
                    statuses[name] = status

        def addSuccess(self, test):
            super().addSuccess(test)
            self.mark(test, "PASSED")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self.mark(test, "FAILED")

        def addError(self, test, err):
            super().addError(test, err)
            self.mark(test, "ERROR")

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self.mark(test, "SKIPPED")

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self.mark(test, "XFAIL")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self.mark(test, "FAILED")

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                failed = issubclass(err[0], test.failureException)
                self.mark(test, "FAILED" if failed else "ERROR")

    members = dict(vars(Result))
    order = dict(Result.order)
    ran = []

    class Runner(DiscoverRunner):
        def get_resultclass(self):
            return Result

        def run_suite(self, suite, **kwargs):
            ran.append(super().run_suite(suite, **kwargs))
            return ran[-1]

    labels = _set_up(runtests, list(labels))
    Runner(verbosity=2, interactive=False, parallel=1).run_tests(labels)
    moved = [k for k, v in members.items() if vars(Result).get(k) is not v]
    if moved or Result.order != order or any(type(r) is not Result for r in ran):
        return {"__tampered__": f"the runner's result class ({', '.join(moved) or 'order'})"}
    return dict(ran[0].__dict__.get("gspo_statuses", {})) if ran else {}


guarded_main(run, GUARDED)  # type: ignore[name-defined]  # noqa: F821 - runner_guard.py, prepended
