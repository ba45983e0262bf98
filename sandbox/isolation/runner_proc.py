"""The in-sandbox runner's process part: one test's program forked under its limits, supervised,
killed and classified (spawn, supervise, strike, kill_everything, run_one, classify).

Runs INSIDE the sandbox as part of runner.py (standard library and runner_guard only; backends/base.py
ships it next to runner_guard as the module `sandbox.isolation.runner_proc`, so runner.py imports it
as it does on the host). Why each step is there: see runner.py's docstring and the comments below.
"""

import math
import os
import resource
import selectors
import signal
import time

from sandbox.isolation import runner_guard as guard

STDERR_CAP = 64 * 1024
MIB = 1 << 20
PROGRAM_NICE = 19  # programs run below the runner (see spawn)


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
        strike(pid, kill_all)
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
