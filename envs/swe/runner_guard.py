"""The guarded result channel of the non-pytest runners (django_runner.py, sympy_runner.py).

Runs INSIDE the grading sandbox, prepended to the runner's own text (runners.script); the runner
ends with `guarded_main(run, GUARDED)`, its `run(args) -> {id: status}` called only after the
steps below. argv: NONCE_FILE DEPS_DIR LOG_FILE
CHANGED_FILE ARGS... Started as `python3 -I -B` in a fresh session. What it does, in order:

1. Takes the functions it needs (json.dumps, os.write, os._exit) and reads and unlinks the nonce;
   reads the list of source files the agent changed (CHANGED_FILE, written by the grader).
2. Installs a PEP 578 audit hook (it cannot be removed) that marks the run tampered when code
   in a changed file, directly or through the stdlib (inspect, traceback), takes frames (sys._getframe,
   sys._current_frames), traces (sys.settrace/setprofile), reads the heap (gc.get_objects /
   get_referrers / get_referents), uses ctypes, opens /proc/*/mem, assigns a function's
   __code__, or sets a special attribute (CPython audits only those) of a class of the runner,
   the stdlib or a test module (object.__setattr__).
   Unchanged repository code and stdlib functions that use a frame for themselves (sympy's
   var(), namedtuple, logging's findCaller) are not marked: a changed file is.
3. Moves stdout/stderr to LOG_FILE and keeps the original stdout on a private fd.
4. After `run` returns: compares, by identity, every function and class member of the
   modules that decide outcomes (unittest, the runner's framework) and builtins with a snapshot
   taken before repository code ran; then writes its records to the private fd in
   grading.parse_records' format (`<nonce> R <id hex> <phase> <outcome> <xfail>` per test,
   `<nonce> T <what hex>` per tampering, `<nonce> E` last) and exits with os._exit.

Everything the verdict rests on (the nonce, the fd, the statuses, the tampering record) lives
in guarded_main's frame and the audit hook's closure, never in module globals: the runner is
`__main__`, whose globals any code reaches through sys.modules. Reaching a frame or the heap
from a changed file is what the audit hook marks. The records are built with str/bytes methods
(no json: a swapped json._default_encoder changes nothing).
"""

import os
import sys

SENSITIVE = (
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "ctypes.",
    "object.__setattr__",
    "open",
)
STDLIB = os.path.dirname(os.__file__)


def _guardable(value):
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


def snapshot(module_names):
    """{label: (namespace, key, object)} of every callable in the modules and their classes."""
    import importlib

    out = {}
    for module_name in (*module_names, "builtins"):
        module = importlib.import_module(module_name)
        out[f"sys.modules[{module_name}]"] = (sys.modules, module_name, module)
        for key, value in list(vars(module).items()):
            if not _guardable(value):
                continue
            out[f"{module_name}.{key}"] = (module, key, value)
            if isinstance(value, type) and value.__module__ == module_name:
                for attr, member in list(vars(value).items()):
                    if _guardable(member):
                        out[f"{module_name}.{key}.{attr}"] = (value, attr, member)
    return out


def _lookup(where, name):
    try:
        return where.get(name) if isinstance(where, dict) else vars(where).get(name)
    except BaseException:  # noqa: BLE001 - an unreadable namespace is a change
        return None


# stdlib functions that take a frame for themselves and never hand it back: their use from a
# changed file is legitimate (a namedtuple, an Enum, a logging call in the fix)
BENIGN = {
    ("__init__.py", "namedtuple"),
    ("__init__.py", "findCaller"),
    ("typing.py", "_caller"),
    ("enum.py", "_create_"),
    ("enum.py", "__call__"),
    ("warnings.py", "warn"),
    ("abc.py", "__new__"),
}


def _machinery(target, stdlib_names=frozenset(sys.stdlib_module_names), modules=sys.modules):
    """A class whose patching changes outcomes: the runner's own (`__main__`, its result class
    reached through __subclasses__()), or one the stdlib or a test module defines (found under
    its name there: a namedtuple or Enum being built is not)."""
    module_name = str(getattr(target, "__module__", ""))
    if module_name == "__main__":
        return True
    parts = module_name.split(".")
    if not (
        parts[0] in stdlib_names
        or any(p in ("test", "tests", "testing") or p.startswith("test_") for p in parts)
    ):
        return False
    found = modules.get(module_name)
    for attr in str(getattr(target, "__qualname__", "")).split("."):
        found = getattr(found, attr, None)
    return found is target


def _hook(changed, tampered, getframe, basename):
    # everything the hook reads is bound here: __main__'s globals are reachable by any code
    busy, sensitive, stdlib, benign = [False], SENSITIVE, STDLIB, frozenset(BENIGN)
    machinery = _machinery

    def culprit(frame, event):
        """The changed file that made this event, directly or through the stdlib."""
        while frame is not None:
            name = frame.f_code.co_filename
            if name in changed:
                return name
            if not name.startswith(stdlib) and not name.startswith("<frozen"):
                return None  # unchanged repository or runner code: legitimate
            if event == "sys._getframe" and (basename(name), frame.f_code.co_name) in benign:
                return None  # the stdlib taking a frame for itself
            frame = frame.f_back  # any other stdlib frame hands the result on: look further
        return None

    def audit(event, args):
        if busy[0] or not event.startswith(sensitive):
            return
        if event == "open":
            path = args[0]
            if not (isinstance(path, str) and path.startswith("/proc/") and "mem" in path):
                return
        elif event == "object.__setattr__":
            target, attr = args[0], args[1]
            if attr != "__code__" and not (isinstance(target, type) and machinery(target)):
                return
        busy[0] = True
        try:
            name = culprit(getframe(1), event)
        finally:
            busy[0] = False
        if name is not None:
            tampered.append(f"{event} from {basename(name)}")

    return audit


def guarded_main(run, guarded_modules):
    write, exit_now = os.write, os._exit
    lookup, record, hexed_ = _lookup, dict(RECORD), hexed  # bound before repository code runs
    nonce_path, deps, log_path, changed_path = sys.argv[1:5]
    with open(nonce_path) as fh:
        nonce = fh.read().strip()
    os.unlink(nonce_path)
    with open(changed_path) as fh:
        changed = frozenset(os.path.abspath(p) for p in fh.read().splitlines() if p.strip())
    tampered = []
    if changed:
        sys.addaudithook(_hook(changed, tampered, sys._getframe, os.path.basename))
    channel = os.dup(1)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.dont_write_bytecode = True
    # the repository first; its pure-Python dependencies (wheels, imported in place) after it
    sys.path[:0] = [os.getcwd()]
    sys.path += sorted(
        os.path.join(deps, n) for n in os.listdir(deps) if n.endswith((".whl", ".zip"))
    )
    guarded = snapshot(guarded_modules)
    statuses = {}
    try:
        statuses = dict(run(sys.argv[5:]))
        if "__tampered__" in statuses:  # the runner's own check of its result machinery
            tampered.append(str(statuses.pop("__tampered__")))
    except BaseException:  # noqa: BLE001 - whatever the code did, report what ran so far
        import traceback

        traceback.print_exc()
    moved = [label for label, (ns, key, obj) in guarded.items() if lookup(ns, key) is not obj]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a test may have replaced or closed it
            pass
    # grading.parse_records' format (as pytest_runner.py writes it): R per test, T, then E
    lines = [f"{nonce} R {hexed_(k)} {' '.join(record[v])}" for k, v in statuses.items()]
    lines += [f"{nonce} T {hexed_(what)}" for what in (tampered + moved)[:20]]
    line = ("\n" + "\n".join([*lines, f"{nonce} E"]) + "\n").encode()
    while line:
        line = line[write(channel, line) :]
    exit_now(0)


# a status as pytest's (phase, outcome, wasxfail), which grading.status_of maps back
RECORD = {
    "PASSED": ("call", "passed", "0"),
    "FAILED": ("call", "failed", "0"),
    "ERROR": ("setup", "failed", "0"),
    "SKIPPED": ("setup", "skipped", "0"),
    "XFAIL": ("call", "skipped", "1"),
    "XPASS": ("call", "passed", "1"),  # status_of: FAILED
}


def hexed(text):
    return str(text).encode("utf-8", "replace").hex()
