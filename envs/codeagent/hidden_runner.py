"""Run inside the sandbox after an episode: evaluate hidden calls against the agent's repository.

argv: REPO_DIR MODULE CASES_JSON MARKER. Prints one line `MARKER <json list>`: per case, the
JSON-able result ({"value": ...}), or {"error": "..."}. The expected values never enter the
sandbox: the host compares. Each case has its own alarm, so one endless call costs one case.
Run with `python3 -I` from outside the repository, so the agent's files cannot shadow the
standard library modules imported here before the repository is put on sys.path.
"""

import json
import signal
import sys


def _timeout(signum, frame):
    raise TimeoutError("the call took too long")


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return {"__repr__": repr(value)[:200]}


def main():
    repo, module, cases_path, marker = sys.argv[1:5]
    with open(cases_path) as f:
        calls = json.load(f)
    out = sys.stdout
    signal.signal(signal.SIGALRM, _timeout)
    # Never read the repository's __pycache__: stale or planted bytecode must not stand in for
    # the source as it is now.
    sys.dont_write_bytecode = True
    sys.pycache_prefix = "/nonexistent-gspo-pycache"
    results = []
    try:
        signal.alarm(5)
        sys.path.insert(0, repo)
        namespace = vars(__import__(module))
        signal.alarm(0)
    except BaseException as exc:  # the agent's module may raise anything, even SystemExit
        signal.alarm(0)
        namespace = None
        error = f"import failed: {type(exc).__name__}"
    for call in calls:
        if namespace is None:
            results.append({"error": error})
            continue
        try:
            signal.alarm(2)
            value = eval(call, dict(namespace))
            signal.alarm(0)
            results.append({"value": _jsonable(value), "type": type(value).__name__})
        except BaseException as exc:
            signal.alarm(0)
            results.append({"error": type(exc).__name__})
    out.write(marker + " " + json.dumps(results) + "\n")
    out.flush()


main()
