"""Per-repository test runners: what runs an instance's tests and how its ids are matched.

    spec = runner_for(inst)            # pytest (default), django or sympy, by inst.repo
    spec.script()                      # the text to run in the sandbox as `python3 -I -B`
    spec.args(list(inst.test_files))   # its arguments (after the guard's)
    passed(test_id, statuses)          # SWE-bench's matching, truncated ids included

As the SWE-bench harness runs each repository (swebench's per-repository specs; the log parsers
in swebench/harness/log_parsers/python.py name the ids):

| repository | SWE-bench's command | here |
|---|---|---|
| django/django | `tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 LABELS` | django_runner.py: runtests.setup_run_tests + DiscoverRunner, ids as its verbose lines |
| sympy/sympy | `bin/test -C --verbose FILES` | sympy_runner.py: sympy's test-file rules, ids the function names |
| sphinx-doc/sphinx | `tox --current-env -epy39 -v -- FILES` | pytest_runner.py: tox --current-env runs pytest in the image's env, which is what this runs |
| pytest-dev/pytest | `pytest -rA FILES` | pytest_runner.py keeping the repository's addopts (`-p pytester`) |
| every other | `pytest -rA FILES` (some `--tb=no`, `-p no:cacheprovider`) | pytest_runner.py with `-o addopts=` |

The django and sympy runners share runner_guard.py (prepended): a private channel, the nonce in
no global, a PEP 578 audit hook installed before repository code runs, and an identity check of
the outcome machinery. Their statuses never come from printed output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from envs.swe.instances import Instance

__all__ = ["DEPS", "RUNNERS", "Runner", "parse_log", "passed", "runner_for"]

HERE = Path(__file__).parent
DEPS = HERE / "data" / "wheels"  # pure-Python wheels the django/sympy runners import in place
SUCCESS = ("PASSED", "XFAIL")


@dataclass(frozen=True)
class Runner:
    name: str
    file: str  # the runner's own script, next to this module
    guarded: bool  # runner_guard.py is prepended (argv: nonce deps log changed ARGS)
    deps: tuple[str, ...] = ()  # wheel names under DEPS (globs)
    keep_addopts: bool = False

    def script(self) -> str:
        text = (HERE / self.file).read_text()
        return (HERE / "runner_guard.py").read_text() + "\n" + text if self.guarded else text

    def args(self, files: list[str]) -> list[str]:
        """The runner's arguments for these test files (the instance's test_files)."""
        files = files or ["."]
        if self.name == "django":
            return [django_label(f) for f in files]
        if self.name == "pytest" and not self.keep_addopts:
            return ["-o", "addopts=", *files]
        return files

    def agent_command(self, files: list[str], *, quiet: bool = False) -> str:
        """How the agent (and the cold-start reference) runs these tests in its workspace."""
        import shlex

        if self.name == "django":
            labels = " ".join(shlex.quote(a) for a in self.args(files))
            return (
                f"python3 tests/runtests.py --parallel 1 {'' if quiet else '--failfast '}{labels}"
            )
        return f"python3 -m pytest -q {'' if quiet else '-x '}" + " ".join(
            shlex.quote(f) for f in files
        )

    def wheels(self) -> list[Path]:
        found = [p for pattern in self.deps for p in sorted(DEPS.glob(pattern))]
        if len(found) < len(self.deps):
            raise FileNotFoundError(
                f"the {self.name} runner needs the wheels {list(self.deps)} under {DEPS}: "
                f"pip download --only-binary :all: --no-deps -d {DEPS} " + " ".join(self.deps)
            )
        return found


RUNNERS = {
    "pytest": Runner("pytest", "pytest_runner.py", guarded=False),
    "pytest-addopts": Runner("pytest", "pytest_runner.py", guarded=False, keep_addopts=True),
    "django": Runner("django", "django_runner.py", True, ("asgiref-*.whl", "sqlparse-*.whl")),
    "sympy": Runner("sympy", "sympy_runner.py", True, ("mpmath-*.whl",)),
}
_BY_REPO = {
    "django/django": "django",
    "sympy/sympy": "sympy",
    "pytest-dev/pytest": "pytest-addopts",
}


def runner_for(inst: Instance) -> Runner:
    return RUNNERS[_BY_REPO.get(inst.repo, "pytest")]


def django_label(path: str) -> str:
    """SWE-bench's Django test directive: tests/utils_tests/test_text.py -> utils_tests.test_text
    (a label already given as one is kept)."""
    if not path.endswith(".py"):
        return path
    parts = PurePosixPath(path[: -len(".py")]).parts
    return ".".join(parts[1:] if parts[0] == "tests" else parts)


def passed(case: str, statuses: dict[str, str], success: tuple[str, ...] = SUCCESS) -> bool:
    """Whether `case` passed, matched as swebench 5.0.2's grading._resolve_case does: exactly,
    or, for an id cut inside its parameters (more `[` than `]`: SWE-bench Verified has 676 ids
    cut at a space), by prefix when every id it prefixes agrees on pass-or-fail."""
    if case in statuses:
        return statuses[case] in success
    if case.count("[") > case.count("]"):
        matches = [statuses[k] in success for k in statuses if k.startswith(case)]
        if matches and len(set(matches)) == 1:
            return matches[0]
    return False


def parse_log(runner: Runner, log: str) -> dict[str, str] | None:
    """The statuses SWE-bench's log parser for this runner reads from its log (swebench 5.0.2
    parse_log_django / parse_log_sympy, their line rules); None for pytest (validate.py has
    that one). validate checks they agree with the private channel's."""
    if runner.name == "django":
        return _parse_django(log)
    if runner.name == "sympy":
        return _parse_sympy(log)
    return None


def _parse_django(log: str) -> dict[str, str]:
    out: dict[str, str] = {}
    prev = None
    for raw in log.split("\n"):
        line = raw.strip()
        if " ... " in line:
            prev = line.split(" ... ")[0]
        for suffix in (" ... ok", " ... OK", " ...  OK"):
            if line.endswith(suffix):
                out[line.rsplit(suffix, 1)[0]] = "PASSED"
                break
        if " ... skipped" in line:
            out[line.split(" ... skipped")[0]] = "SKIPPED"
        if line.endswith(" ... FAIL"):
            out[line.split(" ... FAIL")[0]] = "FAILED"
        if line.endswith(" ... ERROR"):
            out[line.split(" ... ERROR")[0]] = "ERROR"
        if line.startswith("ok") and prev is not None:
            out[prev] = "PASSED"
    return out


def _parse_sympy(log: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in log.split("\n"):
        line = raw.strip()
        if line.startswith("test_"):
            name = line.split()[0]
            for suffix, status in ((" E", "ERROR"), (" F", "FAILED"), (" ok", "PASSED")):
                if line.endswith(suffix):
                    out[name] = status
    return out
