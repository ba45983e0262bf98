"""Function-style judging inside the sandbox: a trusted parent that never runs submitted code.

This file runs INSIDE the sandbox as ``python3 -I -c <this source> main.py ENTRY`` (standard
library only, nothing from the sandbox package) and is also imported on the host for its value
codec. ``-I`` keeps the program-writable scratch and working directories off ``sys.path``, and
the source arrives on the command line, not from a file a submission could replace.

Two processes per test:

parent (trusted)  the test's main process. Its stdout is the result channel read by the runner;
                  it is non-dumpable, so a same-uid process can neither ptrace it nor open its
                  /proc files (fds, memory, environ). It forks the child FIRST, then reads the
                  test payload from stdin (arguments, expected value or check code, and a nonce),
                  unlinks the stdin file, and only then lets the child load the submission: the
                  payload never exists in the child's memory or on a path the child can open.
child (untrusted) starts with stdin on /dev/null and stdout on stderr, holding only its two
                  private pipe ends; it executes the submission (as module ``solution``, so
                  ``if __name__ == "__main__"`` blocks do not run) and answers call requests
                  with the encoded return value or the exception it raised.

Frames on the private pipes are a 4-byte big-endian length and UTF-8 JSON. The parent decodes
replies into plain built-in values only (never pickle, never a submitted object), so a returned
object cannot bring its own ``__eq__``; the comparison, or the HumanEval ``check(candidate)``
code, runs in the parent. The parent prints ``<nonce> OK`` or ``<nonce> WA`` on stdout and exits
0; if the child exits, is killed or never answers, the parent exits non-zero (mirroring a fatal
signal, so SIGXCPU stays a time-limit verdict), so no exit trick of the submission reads as a pass.

Values cross as JSON with tags: ``{"$tuple": [...]}``, ``{"$set": [...]}``,
``{"$frozenset": [...]}``, ``{"$dict": [[k, v], ...]}`` (dicts whose keys are not all strings, or
that have a key starting with "$"), ``{"$int": "0x..."}`` (beyond 64 bits), ``{"$bytes": "<hex>"}``,
``{"$complex": [re, im]}``; floats keep NaN/Infinity. Objects of other types are converted with
``tolist()`` when they have it (numpy), else they cannot be compared.
"""

import builtins
import os
import signal
import sys
import time

MAX_FRAME = 64 << 20  # bytes of one encoded value
_TAGS = ("$tuple", "$set", "$frozenset", "$dict", "$int", "$bytes", "$complex")
_BIG = 1 << 63
PR_SET_DUMPABLE = 4


class Unencodable(TypeError):
    """A value of a type that cannot leave the submission's process."""


# ---- value codec ---------------------------------------------------------------------------
def _plain(value, depth=0):
    """`value` as JSON-ready data with tags (see the module docstring)."""
    if depth > 500:
        raise Unencodable("value nested deeper than 500 levels")
    d = depth + 1
    if value is None or type(value) is bool:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        value = int(value)
        return value if -_BIG < value < _BIG else {"$int": hex(value)}
    if isinstance(value, float):
        return float(value)
    if isinstance(value, complex):
        return {"$complex": [value.real, value.imag]}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, list):
        return [_plain(v, d) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [_plain(v, d) for v in value]}
    if isinstance(value, (set, frozenset)):
        tag = "$frozenset" if isinstance(value, frozenset) else "$set"
        return {tag: [_plain(v, d) for v in value]}
    if isinstance(value, dict):
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: _plain(v, d) for k, v in value.items()}
        return {"$dict": [[_plain(k, d), _plain(v, d)] for k, v in value.items()]}
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _plain(tolist(), d)
    raise Unencodable(f"a value of type {type(value).__name__} is not a plain value")


def encode(value):
    """Bytes that `decode` turns back into an equal plain value; raises Unencodable."""
    try:
        return dumps(_plain(value)).encode()
    except (RecursionError, ValueError) as exc:
        raise Unencodable(str(exc)) from None


def _tagged(obj):
    if len(obj) != 1 or not next(iter(obj)).startswith("$"):
        if any(k.startswith("$") for k in obj):
            raise ValueError("malformed tagged value")
        return obj
    tag, body = next(iter(obj.items()))
    if tag == "$int" and type(body) is str:
        return int(body, 16)
    if tag == "$bytes" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "$complex" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if type(body) is not list or tag not in _TAGS:
        raise ValueError(f"malformed tagged value {tag!r}")
    if tag == "$tuple":
        return tuple(body)
    if tag == "$set":
        return set(body)
    if tag == "$frozenset":
        return frozenset(body)
    if not all(type(p) is list and len(p) == 2 for p in body):
        raise ValueError("malformed $dict")
    return {k: v for k, v in body}


def decode(data):
    """Plain built-in values only; raises ValueError (or RecursionError) on anything else."""
    return loads(data, _tagged)


# ---- JSON on the C accelerator alone ----------------------------------------------------------
# `import json` costs ~7 ms per test here (it imports re and enum), more than the rest of the
# harness; `_json` alone is enough for compact JSON. The json module is the fallback.
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _ScanContext:
    """The attributes `_json.make_scanner` reads (those of a json.JSONDecoder)."""

    strict = True
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__

    def __init__(self, object_hook):
        self.object_hook = object_hook


def _refuse(value):
    raise TypeError(f"{type(value).__name__} is not JSON")


try:
    import _json

    _ENCODE = _json.make_encoder(
        None, _refuse, _json.encode_basestring_ascii, None, ":", ",", False, False, True
    )
    _SCANNERS: dict = {hook: _json.make_scanner(_ScanContext(hook)) for hook in (None, _tagged)}  # type: ignore[arg-type]
except (ImportError, AttributeError, TypeError):  # another Python: the plain json module
    _ENCODE = _SCANNERS = None  # type: ignore[assignment]


def dumps(obj):
    """Compact JSON text (NaN and Infinity allowed, as Python's json writes them)."""
    if _ENCODE is None:
        import json

        return json.dumps(obj, separators=(",", ":"))
    return "".join(_ENCODE(obj, 0))


def loads(data, object_hook=None):
    """Parse one JSON document (str or UTF-8 bytes); ValueError if it is not exactly one."""
    text = data.decode() if isinstance(data, (bytes, bytearray)) else data
    if _SCANNERS is None:
        import json

        return json.loads(text, object_hook=object_hook)
    try:
        value, end = _SCANNERS[object_hook](text, 0)
    except StopIteration as exc:
        raise ValueError(f"not JSON at character {exc.value}") from None
    if end != len(text):
        raise ValueError(f"extra data after JSON at character {end}")
    return value


def values_equal(got, expected, abs_tol=0.0, rel_tol=0.0):
    """Python `==` after one normalisation: a tuple equals the list with the same items
    (recursively, also inside dict values). Sets, dict keys (1 and "1" differ; 1, 1.0 and True
    are equal, as in Python), NaN (never equal) and everything else follow Python. With a
    tolerance, two numbers (not booleans) at any depth also match when |got - expected| is
    within abs_tol or within rel_tol * |expected|."""
    seq = (list, tuple)
    if isinstance(got, seq) and isinstance(expected, seq):
        return len(got) == len(expected) and all(
            values_equal(g, e, abs_tol, rel_tol) for g, e in zip(got, expected)
        )
    if isinstance(got, dict) and isinstance(expected, dict):
        if got.keys() != expected.keys():
            return False
        return all(values_equal(got[k], expected[k], abs_tol, rel_tol) for k in expected)
    if got == expected:
        return True
    if (abs_tol or rel_tol) and _number(got) and _number(expected):
        diff = abs(got - expected)
        return diff <= abs_tol or diff <= rel_tol * abs(expected)
    return False


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shorten(value, limit=200):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# ---- framing -------------------------------------------------------------------------------
def send(fd, obj):
    data = dumps(obj).encode()
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd):
    """One frame's bytes, or None at end of file (the other side is gone)."""
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_FRAME:
        raise ValueError(f"a reply of {size} bytes exceeds {MAX_FRAME}")
    return _read_exactly(fd, size)


def _read_exactly(fd, size):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ---- child (runs the submission) -----------------------------------------------------------
def child_main(source_path, requests, replies):
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # prints land on stderr: the result channel is not ours to write
    keep = sorted({0, 1, 2, requests, replies})
    for low, high in zip(keep, keep[1:] + [1 << 16]):
        os.closerange(low + 1, high)
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if receive(requests) != b'"load"':  # the parent has hidden the payload by now
        os._exit(3)
    entry = sys.argv[2]
    try:
        function = _load(source_path, entry)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
        send(replies, _failure(exc, "while loading the submission"))
        os._exit(1)
    send(replies, {"ready": True})
    while True:
        request = receive(requests)
        if request is None:
            os._exit(0)
        send(replies, _call(function, entry, loads(request)))


def _load(source_path, entry):
    import types

    with open(source_path, encoding="utf-8") as fh:
        code = compile(fh.read(), "main.py", "exec")
    module = types.ModuleType("solution")
    module.__file__ = source_path
    sys.modules["solution"] = module
    sys.argv = ["main.py"]
    exec(code, module.__dict__)
    owner, _, name = entry.rpartition(".")
    if not owner:
        return getattr(module, name)
    cls = getattr(module, owner)
    return lambda *a, **k: getattr(cls(), name)(*a, **k)  # a fresh instance per call


def _call(function, entry, request):
    try:
        args = decode(request["args"])
        value = function(**args) if isinstance(args, dict) else function(*args)
        sys.stdout.flush()
        try:
            return {"value": encode(value).decode()}
        except Unencodable as exc:
            return {"unencodable": f"{entry} returned {exc}"}
    except BaseException as exc:  # noqa: BLE001 - the parent decides what it means
        return _failure(exc, f"in {entry}")


def _failure(exc, where):
    import traceback

    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException:  # noqa: BLE001 - a hostile exception may break formatting
        text = ""
    return {"raised": type(exc).__name__, "where": where, "traceback": text[-8000:]}


# ---- parent (trusted) ----------------------------------------------------------------------
_IGNORED = [
    getattr(signal, n)
    for n in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGTSTP")
    if hasattr(signal, n)
]


class ChildGone(BaseException):
    """The submission's process ended, or sent something that is not a reply. Not an
    Exception, so test code's `except Exception:` cannot swallow it; `Link.broken` remembers
    it even if a bare `except:` does."""


class CandidateRaised(Exception):
    """Marks (as an attribute) an exception that the submitted function raised."""


def parent_main():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    for sig in _IGNORED:  # the child may signal us: nothing but SIGKILL/SIGSTOP may land
        signal.signal(sig, signal.SIG_IGN)
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(req_w)
            os.close(rep_r)
            child_main(sys.argv[1], req_r, rep_w)
        finally:
            os._exit(1)
    os.close(req_r)
    os.close(rep_w)
    link = Link(pid, req_w, rep_r)
    try:
        payload = _take_payload()
        code = judge(link, payload)
        if link.broken:  # test code swallowed the failure: it still is one
            raise ChildGone(link.broken)
    except ChildGone as exc:
        code = link.died(str(exc))
    sys.stdout.flush()
    sys.stderr.flush()
    link.finish()
    os._exit(code)


def _take_payload():
    """Read the test payload and remove every trace of it the child could reach."""
    path = None
    try:
        path = os.readlink("/proc/self/fd/0")
    except OSError:
        pass
    data = sys.stdin.buffer.read()
    if path and path.startswith("/") and os.path.isfile(path):
        try:
            os.unlink(path)
        except OSError as exc:  # never let the child load while the payload is reachable
            sys.stderr.write(f"function-style: cannot hide the test payload: {exc}\n")
            sys.stderr.flush()
            os._exit(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return loads(data)


class Link:
    """The parent's end of the private pipes to the child."""

    def __init__(self, pid, requests, replies):
        self.pid, self.requests, self.replies = pid, requests, replies
        self.status = None
        self.broken = ""

    def ask(self, message):
        if self.broken:
            raise ChildGone(self.broken)
        try:
            return self._ask(message)
        except ChildGone as exc:
            self.broken = self.broken or str(exc)
            raise

    def _ask(self, message):
        try:
            send(self.requests, message)
            data = receive(self.replies)
        except OSError as exc:
            raise ChildGone(f"pipe to the submission broke ({exc})") from None
        if data is None:
            raise ChildGone("the submission's process ended before answering")
        try:
            reply = loads(data)
        except ValueError:
            raise ChildGone("the submission's process sent an unreadable reply") from None
        if type(reply) is not dict:
            raise ChildGone("the submission's process sent an unreadable reply")
        return reply

    def call(self, args_json):
        """Call the function with already-encoded arguments; return its decoded value."""
        reply = self.ask({"args": args_json})
        if "value" in reply and type(reply["value"]) is str:
            try:
                return decode(reply["value"])
            except (ValueError, TypeError, RecursionError, MemoryError) as exc:
                raise ChildGone(f"the returned value could not be read: {exc}") from None
        if "unencodable" in reply:
            raise Unencodable(str(reply["unencodable"])[:500])
        raise _raised(reply)

    def died(self, why):
        """The child failed us: say why on stderr and exit like it did, never with 0."""
        self.finish(grace=True)
        status = self.status
        sys.stderr.write(f"function-style: {why}")
        if status != -1 and os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            sys.stderr.write(f" (killed by signal {sig})\n")
            sys.stderr.flush()
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        elif status == -1:
            sys.stderr.write(" (it was still running; the harness stopped it)\n")
        else:
            sys.stderr.write(f" (it exited with code {os.waitstatus_to_exitcode(status)})\n")
        sys.stderr.flush()
        return 1

    def finish(self, grace=False):
        """Close the pipes, kill and reap the child (so its CPU time and memory count); with
        grace, first give a child that closed its pipe a moment to exit on its own."""
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        self.requests = self.replies = -1
        if self.status is not None:
            return
        for _ in range(20 if grace else 1):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return
            time.sleep(0.0025)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.status = -1  # stopped by us: its own fate is unknown


def _raised(reply):
    """The exception the submitted function raised, rebuilt as a built-in type if it is one."""
    if "raised" not in reply:
        raise ChildGone("the submission's process sent an unreadable reply")
    name, trace = str(reply["raised"]), str(reply.get("traceback", ""))
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = CandidateRaised
    exc = cls(f"{name} {reply.get('where', '')}")
    exc.gspo_traceback = trace
    exc.gspo_candidate = True
    return exc


def judge(link, payload):
    """Load the submission, run the payload's test, print the verdict line; return exit code."""
    nonce, entry = str(payload["nonce"]), sys.argv[2]
    ready = link.ask("load")
    if not ready.get("ready"):
        _report(_raised(ready))
        return 1
    try:
        if "check" in payload:
            return _run_check(link, payload, nonce, entry)
        return _run_call(link, payload, nonce)
    except Unencodable as exc:
        return _verdict(nonce, False, str(exc))
    except Exception as exc:  # noqa: BLE001 - the submitted function raised: a runtime error
        if not getattr(exc, "gspo_candidate", False):
            raise
        _report(exc)
        return 1


def _run_call(link, payload, nonce):
    got = link.call(payload["args"])
    if "expected" not in payload:
        return _verdict(nonce, True, "")
    expected = decode(payload["expected"])
    ok = values_equal(got, expected, payload.get("abs_tol", 0.0), payload.get("rel_tol", 0.0))
    return _verdict(nonce, ok, f"returned {shorten(got)}, expected {shorten(expected)}")


def _run_check(link, payload, nonce, entry):
    """HumanEval / MBPP style: the test code runs here, `candidate` calls into the child."""

    def candidate(*args, **kwargs):
        try:
            encoded = encode(list(args) if not kwargs else _kwargs(args, kwargs)).decode()
        except Unencodable as exc:
            raise TypeError(f"candidate() got an argument that cannot be sent: {exc}") from None
        return link.call(encoded)

    candidate.__name__ = entry.rpartition(".")[2]
    namespace = {"__name__": "__check__", "candidate": candidate, candidate.__name__: candidate}
    try:
        exec(compile(payload["check"], "test.py", "exec"), namespace)
        check = namespace.get("check")
        if callable(check) and check is not candidate:
            check(candidate)
    except AssertionError as exc:
        return _verdict(nonce, False, "assertion failed" + (f": {exc}" if str(exc) else ""))
    except ChildGone:
        raise
    except Exception as exc:  # noqa: BLE001 - a wrong value may break the test code itself
        if getattr(exc, "gspo_candidate", False):
            raise
        return _verdict(nonce, False, f"the test raised {type(exc).__name__}: {exc}")
    return _verdict(nonce, True, "")


def _kwargs(args, kwargs):
    if args:
        raise Unencodable("mixing positional and keyword arguments is not supported")
    return kwargs


def _verdict(nonce, ok, detail):
    sys.stdout.write(f"{nonce} {'OK' if ok else 'WA'}\n")
    if not ok and detail:
        sys.stderr.write(f"function-style: wrong answer: {detail}\n")
    return 0


def _report(exc):
    trace = getattr(exc, "gspo_traceback", "")
    sys.stderr.write(trace or f"function-style: {exc}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    parent_main()
