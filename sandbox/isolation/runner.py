"""The in-sandbox runner: one process per submission that compiles once and runs every test.

This file runs INSIDE the sandbox (``python3 -S -c <this source>``), standard library only, and
must not import anything from the sandbox package. It never sees expected outputs: it only runs the
program and reports what happened; the host judges.

Protocol (one JSON object per line):
  host -> runner   the request: {"language", "source", "tests": [{"stdin", "files"?, "argv"?,
                   "collect"?: names of files to send back from the test's dir}],
                   "limits": {...}, "compile_limits": {...}, "interactive", "kill_all",
                   "scratch_parent", "wipe_dirs", "seccomp", "cgroup"}
                   ("cgroup": {"compile": group, "test": group} of inherited cgroup file fds,
                   see runner_guard.Tree; None: the /proc fallback, or, with --ctl, the fds
                   the host passed over the control socket at start)
  runner -> host   {"event": "compile", "ok", "output", "binary"?}  (binary: base64, when the
                   request asked with "return_binary": max bytes; a request may carry "binary" to skip
                   compiling: sandbox/judging/compile_cache.py)
                   {"event": "test", "index", "status", "exit_code", "time_s", "wall_s", "memory_mb",
                    "stdout", "stderr", "message", "files"?}     (status: ok|tle|mle|re|ole)
                   {"event": "error", "message"}   (the runner itself failed: a system error)
                   {"event": "done", "clean": bool, "leftovers": [...]}
                   (clean: the slot's writable dirs and IPC tables are verifiably empty)
  host -> runner   after each test when "interactive": "next" or "stop" (early stop on failure)
With --serve the runner handles one request per line until stdin closes (a warm container's pid 1);
otherwise it handles one request and exits. With --ctl PATH it first receives the slot's
cgroup fds over the unix socket PATH (docker, where fds cannot be inherited).

Each test runs in a forked child (runner_proc.py): its own session and process group, its own working directory,
the slot's test cgroup (memory, processes and CPU of the whole tree; runner_guard.Tree), the
seccomp filter (runner_guard.install_seccomp), rlimits for CPU time, stack, file size, processes
and core dumps; the runner enforces wall time, tree CPU time and the stdout cap. There is no
address-space limit: memory is limited as resident memory of the tree, so threads and programs
that reserve more than they touch work. It is the parent subreaper, and when "kill_all" is set
(only inside an isolated pid namespace / container) it SIGKILLs every process it may signal
after each test, so nothing a test started survives into the next one. It dies with its parent
(PR_SET_PDEATHSIG), so a sandbox never outlives the host process that started it.
"""

import array
import base64
import ctypes
import json
import os
import resource
import signal
import socket
import stat
import sys
import tempfile
import traceback

from sandbox.isolation import runner_guard as guard
from sandbox.isolation.runner_proc import MIB, STDERR_CAP, apply_limits, run_one

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
SETUP_FAILED = 3  # exit code of a syntax-check child whose setup failed (it runs no user code)
CTL_GROUPS = None  # cgroup fds received over --ctl (docker); used when a request has none


def set_nondumpable():
    """Programs run as our uid: without this they could ptrace us or write /proc/<us>/mem."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def set_subreaper():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


HARNESS_CODE: dict[
    str, str
] = {}  # harness source -> its marshalled code object (hex), compiled once per runner
HARNESS_BOOT = "import marshal, sys; exec(marshal.loads(bytes.fromhex(sys.argv.pop(1))), {'__name__': '__main__'})"


def harness_argv(req, run_argv):
    """With a request's "harness": {"source", "argv"} (python; function-style tests, see
    sandbox/judging/fnharness.py) each test runs `python3 -I -c BOOT CODE main.py *ARGV`: trusted code from
    the command line, not from a file the program could replace, and -I keeps the
    program-writable directories off sys.path. CODE is the harness compiled here, by this same
    interpreter, once (not once per test: compiling it costs more than running it)."""
    harness = req.get("harness")
    if not harness or req["language"] != "python":
        return run_argv
    source = harness["source"]
    if source not in HARNESS_CODE:
        import marshal

        HARNESS_CODE.clear()
        HARNESS_CODE[source] = marshal.dumps(compile(source, "fnharness.py", "exec")).hex()
    return [
        "python3",
        "-I",
        "-c",
        HARNESS_BOOT,
        HARNESS_CODE[source],
        *run_argv[1:],
        *harness["argv"],
    ]


def compile_program(req, scratch, kill_all):
    """Return (argv, ok, output)."""
    src = os.path.join(scratch, "main.py" if req["language"] == "python" else "main.cpp")
    with open(src, "w", encoding="utf-8") as fh:
        fh.write(req["source"])
    empty = os.path.join(scratch, ".empty")
    open(empty, "w").close()
    clim = req["compile_limits"]
    group, seccomp = phase_group(req, "compile"), req.get("seccomp", False)
    if req["language"] == "python":
        ok, output = check_python_syntax(req["source"], clim)
        return ["python3", src], ok, output
    else:
        binary = os.path.join(scratch, "main")
        argv = ["g++", "-std=c++17", "-O2", "-pipe", "-o", binary, src]
        run_argv = [binary]
        if req.get("binary"):  # a compile-cache hit (sandbox/judging/compile_cache.py): no compile
            with open(binary, "wb") as fh:
                fh.write(base64.b64decode(req["binary"]))
            os.chmod(binary, 0o755)
            return run_argv, True, ""
    res = run_one(argv, empty, scratch, clim, kill_all, group, seccomp)
    if res["status"] == "ok":
        return run_argv, True, ""
    output = res["stderr"] or res["stdout"]
    if res["status"] != "re":
        output = "compiler: " + res["message"] + "\n" + output
    return run_argv, False, output.replace(scratch + "/", "")


def check_python_syntax(source, clim):
    """Compile (never run) the source in a forked, limited child: saves an interpreter start.

    It runs no user code, so it stays out of the cgroups (joining one costs an RCU grace
    period, ~10 ms); an address-space limit bounds it instead (it starts no threads)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            apply_limits(clim)
            mem = int(clim["memory_mb"] * MIB)
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        except BaseException:  # noqa: BLE001 - our setup failed: not a compile error
            os._exit(SETUP_FAILED)
        try:
            compile(source, "main.py", "exec")
        except BaseException as exc:  # noqa: BLE001 - SyntaxError, ValueError, MemoryError...
            text = "".join(traceback.format_exception_only(type(exc), exc))
            os.write(write_fd, text.encode("utf-8", "replace")[:STDERR_CAP])
            code = 1
        os._exit(code)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == SETUP_FAILED:
        raise RuntimeError("cannot set up the syntax check (limits)")
    message = b"".join(chunks).decode("utf-8", "replace")
    if status != 0 and not message:
        message = f"compiler: syntax check died ({os.waitstatus_to_exitcode(status)})"
    return status == 0, message


def run_tests(req, scratch, run_argv):
    kill_all = req["kill_all"]
    for index, test in enumerate(req["tests"]):
        cwd = os.path.join(scratch, f"t{index}")
        os.mkdir(cwd)
        for name, content in (test.get("files") or {}).items():
            with open(os.path.join(cwd, os.path.basename(name)), "w", encoding="utf-8") as fh:
                fh.write(content)
        stdin_path = os.path.join(cwd, ".stdin")
        with open(stdin_path, "w", encoding="utf-8") as fh:
            fh.write(test.get("stdin", ""))
        argv = run_argv + list(test.get("argv") or [])
        group, seccomp = phase_group(req, "test"), req.get("seccomp", False)
        result = run_one(argv, stdin_path, cwd, req["limits"], kill_all, group, seccomp)
        collected = collect_files(cwd, test.get("collect") or ())
        if collected:
            result["files"] = collected
        guard.remove_tree(cwd)
        emit(dict(result, event="test", index=index))
        if req.get("interactive") and sys.stdin.readline().strip() != "next":
            return


def collect_files(cwd, names):
    """Regular files the test left in its dir (a Kattis validator's judgemessage.txt), capped.
    O_NOFOLLOW and O_NONBLOCK: a symlink or a FIFO left there is skipped, never followed."""
    out = {}
    for name in names:
        path = os.path.join(cwd, os.path.basename(name))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                out[name] = os.read(fd, STDERR_CAP).decode("utf-8", "replace")
        finally:
            os.close(fd)
    return out


def phase_group(req, phase):
    """The cgroup fds for the compile or test phase (see runner_guard.Tree), or None."""
    groups = req.get("cgroup") or CTL_GROUPS
    return groups.get(phase) if groups else None


def handle(req):
    scratch = tempfile.mkdtemp(prefix="run-", dir=req.get("scratch_parent") or None)
    guard.prepare(phase_group(req, "test"))
    if req.get("seccomp"):
        guard.prepare_seccomp()
    try:
        run_argv, ok, output = compile_program(req, scratch, req["kill_all"])
        event = {"event": "compile", "ok": ok, "output": output[-STDERR_CAP:]}
        cap = req.get("return_binary") or 0  # the compile cache's size cap in bytes
        if ok and req["language"] == "cpp" and 0 < os.path.getsize(run_argv[0]) <= cap:
            with open(run_argv[0], "rb") as fh:
                event["binary"] = base64.b64encode(fh.read()).decode("ascii")
        emit(event)
        if ok:
            run_tests(req, scratch, harness_argv(req, run_argv))
    finally:
        guard.remove_tree(scratch)


def receive_groups(path):
    """--ctl: connect to the host's unix socket and take the cgroup fds it sends (docker)."""
    global CTL_GROUPS
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        fds = array.array("i")
        data, ancdata, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(64 * fds.itemsize))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    layout = json.loads(data)
    mapping = dict(zip(layout["host_fds"], fds))

    def local(key, value):  # the host's fd numbers -> ours; flags stay as they are
        if key in ("version", "oom_disabled") or value is None:
            return value
        return [mapping[f] for f in value] if isinstance(value, list) else mapping[value]

    CTL_GROUPS = {
        phase: {key: local(key, value) for key, value in group.items()}
        for phase, group in layout["groups"].items()
    }


def main():
    """One request, or with --serve one request per line until stdin closes."""
    set_subreaper()
    set_nondumpable()
    serve = "--serve" in sys.argv
    if "--ctl" in sys.argv:
        try:
            receive_groups(sys.argv[sys.argv.index("--ctl") + 1])
        except (OSError, ValueError, KeyError, IndexError) as exc:
            emit({"event": "error", "message": f"runner: no cgroup fds from the host: {exc!r}"})
            return
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        req, clean, leftovers = {}, True, []
        try:
            req = json.loads(line)
            handle(req)
        except Exception as exc:  # noqa: BLE001 - the host reports it as a system error
            emit({"event": "error", "message": f"runner: {exc!r}"})
        finally:
            if req.get("wipe_dirs"):  # a warm slot: leave nothing for the next run
                clean, leftovers = guard.clean_slot(req["wipe_dirs"])
        emit({"event": "done", "clean": clean, "leftovers": leftovers})
        if not serve:
            return


if __name__ == "__main__":
    main()
