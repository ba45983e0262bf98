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

Each test runs in a forked child: its own session and process group, its own working directory,
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
import math
import os
import resource
import selectors
import signal
import socket
import stat
import sys
import tempfile
import time
import traceback

from sandbox.isolation import runner_guard as guard

STDERR_CAP = 64 * 1024
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
MIB = 1 << 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROGRAM_NICE = 19  # programs run below the runner (see spawn)
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


def apply_limits(lim):
    cpu = max(1, math.ceil(lim["time_s"] + 0.5))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    # The main thread may recurse as deep as its memory allows. No RLIMIT_AS: memory is the
    # tree's resident memory (runner_guard.Tree), so reserved-but-untouched memory (thread
    # stacks, which glibc sizes from RLIMIT_STACK, arenas, CPython's reservations) is free.
    mem = int(lim["memory_mb"] * MIB)
    resource.setrlimit(resource.RLIMIT_STACK, (mem, mem))
    fsize = int(lim.get("file_bytes", 64 * MIB))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def spawn(argv, stdin_path, cwd, lim, tree, seccomp):
    """Fork a child that execs argv under lim in tree; return (pid, stdout_fd, stderr_fd).

    Whatever fails before exec (joining the cgroup, the seccomp filter, exec itself) is ours,
    not the program's: the child reports it on a close-on-exec pipe, which a successful exec
    closes empty, and we raise (a system error), so a program can never fake it."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()  # both close-on-exec (Python's default)

    def child():  # never returns
        try:
            os.setsid()
            os.chdir(cwd)
            fd = os.open(stdin_path, os.O_RDONLY)
            os.dup2(fd, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            tree.join()
            os.closerange(3, status_w)
            os.closerange(status_w + 1, 1 << 16)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            # Below the runner: under a fork storm the program's processes outnumber it, and it
            # must still get the CPU to read their usage and kill them at the limit (without
            # CAP_SYS_NICE they cannot renice back; the session agent does the same).
            os.setpriority(os.PRIO_PROCESS, 0, PROGRAM_NICE)
            apply_limits(lim)
            if seccomp:
                guard.install_seccomp()
            os.execvpe(
                argv[0],
                argv,
                {
                    "PATH": "/usr/local/bin:/usr/bin:/bin",
                    "HOME": cwd,
                    "LANG": "C.UTF-8",
                    "PYTHONDONTWRITEBYTECODE": "1",
                },
            )
        except BaseException as exc:  # noqa: BLE001 - report anything, then die
            try:
                os.write(status_w, repr(exc).encode()[:4000] or b"?")
            except BaseException:  # noqa: BLE001 - nothing left to report with
                pass
        os._exit(127)

    pid = tree.fork(child)
    os.close(out_w)
    os.close(err_w)
    os.close(status_w)
    failure = os.read(status_r, 4096).decode("utf-8", "replace")
    os.close(status_r)
    if failure:
        os.waitpid(pid, 0)
        os.close(out_r)
        os.close(err_r)
        raise RuntimeError(f"cannot start {argv[0]}: {failure}")
    return pid, out_r, err_r


def cpu_poll_s(left, spent, elapsed):
    """When to read the tree's CPU next: every POLL_S, and sooner as the limit nears (half the
    time the current burn rate needs to reach it, 1 ms at least), so that a tree burning every
    core overshoots its limit by about a millisecond of CPU per core, not a poll's worth (the
    session agent's rule, sandbox/sessions/agent.py)."""
    rate = spent / elapsed if elapsed > 0 else 0.0
    if rate <= 0:
        return guard.POLL_S
    return min(guard.POLL_S, max(0.001, left / rate / 2))


def strike(pid, kill_all):
    """At a limit, kill the tree at once: under a fork storm every moment until the kill is CPU
    over the limit. The process group misses what called setsid(); with kill_all (alone in our
    pid namespace) kill(-1) reaches every process of the tree in one syscall."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if kill_all:
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_everything(pid, kill_all):
    """SIGKILL the test's process group (and with kill_all every process we may signal) and
    reap until no descendant is left. We are a subreaper, so every orphan is our child; the
    loop repeats the kill because a fork bomb forks while being killed."""
    while True:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if kill_all:
            try:
                os.kill(-1, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if reaped == 0:
            time.sleep(0.001)


def supervise(pid, out_fd, err_fd, lim, tree):
    """Collect output under the caps until the child exits; return (status_dict, rusage)."""
    cap = int(lim["output_bytes"])
    deadline = time.monotonic() + lim["wall_time_s"]
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(pid)
    sel.register(out_fd, selectors.EVENT_READ, "out")
    sel.register(err_fd, selectors.EVENT_READ, "err")
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    out, err = bytearray(), bytearray()
    reason, exited = "", False
    next_poll = 0.0
    last = (time.monotonic(), 0.0)  # (when, tree CPU) at the previous sample
    while not reason and (not exited or len(sel.get_map()) > 1):
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            reason = "wall"
            break
        # RLIMIT_CPU has 1 s granularity and sees one process; the tree's CPU time (all its
        # processes, waited for or not, setsid() or not: the cgroup's count) is polled every
        # POLL_S, sooner as the limit nears.
        now = time.monotonic()
        if now >= next_poll:
            cpu, over_memory = tree.sample(pid)
            if cpu > lim["time_s"]:
                reason = "cpu"
                break
            if over_memory:
                reason = "memory"
                break
            next_poll = now + cpu_poll_s(lim["time_s"] - cpu, cpu - last[1], now - last[0])
            last = (now, cpu)
        for key, _ in sel.select(max(0.0, min(timeout, next_poll - now))):
            if key.data == "exit":
                exited = True
                sel.unregister(pidfd)
                continue
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fd)
            elif key.data == "out":
                out += chunk
                if len(out) > cap:
                    reason = "output"
            elif len(err) < STDERR_CAP:
                err += chunk[: STDERR_CAP - len(err)]
        if exited and len(sel.get_map()) > 1:
            # The program exited but something it started still holds the pipes open.
            if not sel.select(0.05):
                break
    sel.close()
    os.close(pidfd)
    return out[:cap], err, reason


def run_one(argv, stdin_path, cwd, lim, kill_all, group=None, seccomp=False):
    tree = guard.Tree(group, kill_all, lim)
    tree.begin()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    pid, out_fd, err_fd = spawn(argv, stdin_path, cwd, lim, tree, seccomp)
    reason = "runner error"
    try:
        out, err, reason = supervise(pid, out_fd, err_fd, lim, tree)
    finally:
        # Collect the test's own status first (the kill loop below would reap it anonymously).
        if reason:
            strike(pid, kill_all)
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - started  # start to exit, as SandboxFusion's execution_time
        kill_everything(pid, kill_all)
        os.close(out_fd)
        os.close(err_fd)
    # Every process of the tree was reaped by us (we are the subreaper), so the growth of our
    # children's rusage is the CPU time of the whole tree, waited for by the program or not.
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    mem_mb, oom = tree.finish(usage.ru_maxrss)
    if oom and not reason:
        reason = "memory"
    code = os.waitstatus_to_exitcode(status)
    stderr = err.decode("utf-8", "replace")
    status_name, message = classify(reason, code, cpu, mem_mb, stderr, lim)
    return {
        "status": status_name,
        "exit_code": code if not reason else None,
        "time_s": cpu,
        "wall_s": wall,
        "memory_mb": mem_mb,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": stderr,
        "message": message,
    }


def classify(reason, code, cpu, mem_mb, stderr, lim):
    if reason == "output":
        return "ole", f"stdout exceeded {lim['output_bytes']} bytes"
    if reason == "memory":
        return "mle", f"memory limit of {lim['memory_mb']} MB exceeded by the process tree"
    if reason in ("wall", "cpu") or cpu > lim["time_s"] or code == -signal.SIGXCPU:
        why = "wall time" if reason == "wall" else "CPU time"
        return "tle", f"{why} limit exceeded (cpu {cpu:.2f}s)"
    memory_hit = (
        mem_mb >= 0.95 * lim["memory_mb"] or "MemoryError" in stderr or "bad_alloc" in stderr
    )
    if code != 0 and memory_hit:
        return "mle", f"memory limit of {lim['memory_mb']} MB exceeded"
    if code == -signal.SIGXFSZ:
        return "ole", "file size limit exceeded"
    if code != 0:
        sig = f" (signal {signal.Signals(-code).name})" if code < 0 else ""
        return "re", f"exit code {code}{sig}"
    return "ok", ""


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
