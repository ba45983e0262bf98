"""The in-sandbox session agent: one long-lived process per session that the host talks to.

This file runs INSIDE the sandbox (``python3 -S -c <this source>``) as pid 1 of the session's pid
namespace, standard library only; it must not import anything from the sandbox package. The host
keeps its stdin/stdout open for the whole session (one `docker run -i` / one bwrap process), so a
call costs one JSON line each way instead of a `docker exec`.

Protocol (one JSON object per line, one request at a time):
  host -> agent   first line: {"workspace", "limits": {memory_mb, processes, file_bytes},
                  "kernel_source", "cgroup" (the session group's fds, or null), "ctl" (a unix
                  socket to take those fds from, docker; or null), optional "seed" ([from, to]:
                  a tree copied before ready, e.g. an image's repository into a writable
                  /testbed), "path_prefix" (put first on the commands' PATH) and "python_argv"
                  (the kernel's interpreter, default ours)}; the agent
                  answers {"ready": true}
                  then requests {"op": "exec"|"python"|"write"|"read"|"untar"|"usage"|"kill"|
                  "digest"|"ping", ...}; each gets exactly one answer line ({"error", "kind"}
                  on failure).
  digest          {"root", "suffix", "skip"} (every regular file under root with that suffix,
                  no symlink followed, dirs named in skip left out) or {"paths"}; "max_bytes" ->
                  {"digests": {path relative to root, or as given: sha256 hex | null}}
  exec/python     {"command"|"code", "timeout_s", "cpu_s", "output_bytes"} ->
                  {"exit_code", "stdout", "stderr", "stdout_cut", "stderr_cut", "wall_s",
                   "cpu_s", "reason" ("" | "wall" | "cpu" | "died" | "control"),
                   "kernel_restarted", "oom_kills"}
Closing stdin ends the session: the agent kills everything and exits (and with it the sandbox).

After every call every process but the agent and the idle kernel is killed and the kernel is
stopped (SIGSTOP, resumed by the next python call), so nothing a call starts runs on between
calls, and a call's CPU (`cpu_s`) covers its whole process tree: the session's cgroup counts
every process in it (agent_limits.py); without one, the agent is the subreaper and reaps every
orphan, so children nobody waited for are counted too.

The agent's own work for a call is bounded and counted: its CPU from the call's start to its
answer is part of `cpu_s` (and of the CPU limit), whatever the call made it do (read a flood,
sweep a fork storm); a control channel the cell can write (the kernel's "cell done" pipe, fd 4)
is read once, line by line, up to CONTROL_BYTES a call: past that the kernel is killed and
restarted and the call ends with reason "control" (the cell's doing, not the agent's memory);
the request pipe (fd 3) is written without blocking, inside the call's limits.
"""

import base64
import ctypes
import json
import os
import resource
import selectors
import signal
import sys
import tarfile
import time

if "write_new" not in globals():  # on the host; inside, the host sent those files' source first
    from sandbox.sessions.agent_calls import (
        CONTROL_BYTES,
        WRAPPER,
        DoneReader,
        cpu_poll_s,
        drain,
        not_started,
    )
    from sandbox.sessions.agent_files import (
        copy_tree,
        digest,
        read_regular,
        untar,
        walk_files,
        write_new,
    )
    from sandbox.sessions.agent_limits import Group, ProcTree, receive_group, stop, strike

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
MIB = 1 << 20
CALL_NICE = 19
STOP_WAIT_S = 2.0  # a kernel thread stuck in the kernel (D state) longer than this: kill it
STATE_DIR = "/tmp/.gspo-shell"
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


def prctl(option, value):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def send(obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def agent_cpu():
    """The agent's own CPU time (it is single-threaded): charged to the call it serves."""
    return time.process_time()


class Agent:
    def __init__(self, config):
        self.workspace = config["workspace"]
        self.limits = config["limits"]
        self.kernel_source = config["kernel_source"]
        # the python the kernel runs on: ours (an image's sessions: its loader, see images.py)
        self.python_argv = list(config.get("python_argv") or [sys.executable or "/usr/bin/python3"])
        self.kernel = None  # (pid, request_w, done_r, out_r, err_r)
        self.cells = 0  # numbers the kernel's cells; a "done" line must carry the current one
        self.env = dict(BASE_ENV, HOME=self.workspace)
        if config.get("path_prefix"):
            self.env["PATH"] = config["path_prefix"] + ":" + self.env["PATH"]
        group = config.get("cgroup")
        if group is not None and config.get("ctl"):
            group = receive_group(config["ctl"])
        self.tree = Group(group) if group is not None else ProcTree()

    # ---- processes ------------------------------------------------------------------
    def child_limits(self):
        mem = int(self.limits["memory_mb"] * MIB)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        fsize = int(self.limits["file_bytes"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        nproc = int(self.limits["processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        # Below the agent: under a fork storm its processes outnumber the agent, which must still
        # get the CPU to read their usage and kill them at the limit (they cannot renice back).
        os.setpriority(os.PRIO_PROCESS, 0, CALL_NICE)

    def spawn(self, argv, env, extra_fds=()):
        """Fork argv with stdin /dev/null, fresh stdout/stderr pipes and extra fds at 3, 4..."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            raise
        if pid == 0:
            try:
                os.setsid()
                self.tree.join()  # before the group's fds are closed below
                os.chdir(self.workspace)
                null = os.open("/dev/null", os.O_RDONLY)
                moved = [os.dup(fd) for fd in extra_fds]  # out of the way of 0..4
                os.dup2(null, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                for i, fd in enumerate(moved):
                    os.dup2(fd, 3 + i)
                os.closerange(3 + len(moved), 1 << 16)
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                self.child_limits()
                os.execve(argv[0], argv, env)
            except BaseException as exc:  # noqa: BLE001 - report anything, then die
                os.write(2, f"agent: exec failed: {exc!r}\n".encode())
            os._exit(127)
        os.close(out_w)
        os.close(err_w)
        return pid, out_r, err_r

    def pause_kernel(self):
        """Stop the kept kernel so that nothing of a python call runs on between calls (the
        next python call resumes it, and its CPU counts what the threads then do). False when
        it did not stop in time: kill it then."""
        return stop(self.kernel[0], STOP_WAIT_S)

    def kill_others(self, keep_kernel):
        """SIGKILL every process but us (and the kernel when kept); reap until none is left."""
        me = os.getpid()
        keep = {me}
        if keep_kernel and self.kernel is not None:
            keep.add(self.kernel[0])
        while True:
            alive = False
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in keep:
                    continue
                try:
                    with open(f"/proc/{name}/stat") as fh:
                        state, ppid = fh.read().rsplit(")", 1)[1].split()[:2]
                except (OSError, ValueError):
                    continue  # gone already
                if state == "Z" and int(ppid) in keep and int(ppid) != me:
                    continue  # a dead child of the kept kernel: the kernel's to reap
                alive = True
                try:
                    os.kill(int(name), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    pid = 0
                if pid == 0:
                    break
                if self.kernel is not None and pid == self.kernel[0]:
                    self.drop_kernel()
                    keep.discard(pid)
            if not alive:
                return
            time.sleep(0.001)

    def drop_kernel(self):
        if self.kernel is None:
            return
        for fd in self.kernel[1:]:
            try:
                os.close(fd)
            except OSError:
                pass
        self.kernel = None

    # ---- calls --------------------------------------------------------------------------
    def baseline(self):
        return {"cpu0": self.tree.cpu() + agent_cpu(), "oom0": self.tree.ooms()}

    def used_cpu(self, base):
        """CPU of the call so far: its process tree's and the agent's own."""
        return self.tree.cpu() + agent_cpu() - base["cpu0"]

    def collect(self, pid, out_fd, err_fd, req, done_fd=None, base=None, feed=None):
        """Read output (keeping each stream's tail) until the call ends or hits a limit.
        `feed`: (fd, bytes) to write to a non-blocking fd as it takes them (the request)."""
        cap = int(req["output_bytes"])
        start = time.monotonic()
        deadline = start + float(req["timeout_s"])
        cpu_limit = float(req["cpu_s"])
        base = base or self.baseline()
        bufs = {"out": bytearray(), "err": bytearray()}
        cut = {"out": 0, "err": 0}
        done = DoneReader(req.get("cell"))
        sel = selectors.DefaultSelector()
        sel.register(out_fd, selectors.EVENT_READ, "out")
        sel.register(err_fd, selectors.EVENT_READ, "err")
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        if done_fd is not None:
            sel.register(done_fd, selectors.EVENT_READ, "done")
        pending = b""
        if feed is not None and feed[1]:
            pending = feed[1]
            sel.register(feed[0], selectors.EVENT_WRITE, "feed")
        # The host sends nothing during a call: stdin readable now means it closed (the trainer
        # died or gave up on us): stop everything and exit, taking the sandbox with us.
        sel.register(0, selectors.EVENT_READ, "host")
        reason, finished, status = "", False, None
        finished_at, next_cpu_check = 0.0, 0.0
        last = (start, 0.0)  # (when, CPU used) at the previous check
        while True:
            now = time.monotonic()
            if now >= deadline:
                reason = "wall"
                break
            if now >= next_cpu_check:
                used = self.used_cpu(base)
                if used > cpu_limit:
                    reason = "cpu"
                    break
                next_cpu_check = now + cpu_poll_s(cpu_limit - used, used - last[1], now - last[0])
                last = (now, used)
            if done.over:
                reason = "control"
                break
            if finished and (now - finished_at > 0.1 or not self.drain_ready(sel)):
                break  # ended; stop at once unless output is still arriving (0.1 s at most)
            wait = min(deadline, next_cpu_check) - now
            for key, _ in sel.select(max(wait, 0.0)):
                if key.data == "host":
                    self.kill_others(keep_kernel=False)
                    os._exit(0)
                if key.data == "feed":
                    try:
                        pending = pending[os.write(key.fd, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except OSError:
                        pending = b""  # the kernel closed it: it exits, and we see that
                    if not pending:
                        sel.unregister(key.fd)
                    continue
                if key.data == "exit":
                    sel.unregister(pidfd)
                    _, status = os.waitpid(pid, 0)
                    finished, finished_at = True, time.monotonic()
                    if done_fd is not None:
                        reason = "died"
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    if key.data == "done" and not finished:
                        finished, finished_at, reason = True, time.monotonic(), "died"
                    continue
                if key.data == "done":
                    if done.msg is None and done.feed(chunk) is not None:
                        finished, finished_at = True, time.monotonic()
                    elif done.msg is not None:
                        done.total += len(chunk)  # after its line: only counted, never kept
                        done.over = done.over or done.total > CONTROL_BYTES
                    continue
                buf = bufs[key.data]
                buf += chunk
                if len(buf) > cap:
                    cut[key.data] += len(buf) - cap
                    del buf[: len(buf) - cap]
        if reason in ("wall", "cpu"):
            keep = {os.getpid()}
            if done_fd is None and self.kernel is not None:  # an exec call: the kernel stays
                keep.add(self.kernel[0])
            strike(pid, keep)
        sel.close()
        os.close(pidfd)
        return {
            "reason": reason,
            "status": status,
            "done": done.msg,
            "stdout": bytes(bufs["out"]),
            "stderr": bytes(bufs["err"]),
            "stdout_cut": cut["out"],
            "stderr_cut": cut["err"],
            "wall_s": time.monotonic() - start,
            **base,
        }

    @staticmethod
    def drain_ready(sel):
        """After the call finished: is there still output to read right now?"""
        fds = [k for k in sel.get_map().values() if k.data in ("out", "err")]
        if not fds:
            return False
        return bool(sel.select(0.005))

    def finish(self, got, keep_kernel):
        """Stop the kept kernel, kill everything else, then measure the whole tree's CPU
        (reaped orphans included) and count the OOM kills of the call."""
        had_kernel = keep_kernel and self.kernel is not None
        stopped = had_kernel and self.pause_kernel()
        self.kill_others(stopped)  # a kernel that would not stop goes too
        cpu = max(0.0, self.used_cpu(got))
        return {
            "kernel_restarted": had_kernel and not stopped,
            "oom_kills": max(0, self.tree.ooms() - got["oom0"]),
            "stdout": got["stdout"].decode("utf-8", "replace"),
            "stderr": got["stderr"].decode("utf-8", "replace"),
            "stdout_cut": got["stdout_cut"],
            "stderr_cut": got["stderr_cut"],
            "wall_s": got["wall_s"],
            "cpu_s": cpu,
            "reason": got["reason"] if got["reason"] != "died" else "",
        }

    def op_exec(self, req):
        if req.get("fresh"):  # a clean shell: the saved state is neither restored nor saved
            env, argv = dict(self.env), ["/bin/bash", "--noprofile", "--norc", "-c", req["command"]]
        else:
            env = dict(self.env, GSPO_COMMAND=req["command"])
            argv = ["/bin/bash", "--noprofile", "--norc", "-c", WRAPPER]
        try:
            pid, out_r, err_r = self.spawn(argv, env)
        except OSError as exc:  # the session's own processes hold the process cap
            return not_started(exc)
        try:
            got = self.collect(pid, out_r, err_r, req)
        finally:
            os.close(out_r)
            os.close(err_r)
        if got["status"] is None:  # stopped by a limit before it exited: kill it, reap it
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            os.waitpid(pid, 0)
        result = self.finish(got, keep_kernel=True)
        code = None
        if not got["reason"] and got["status"] is not None:
            code = os.waitstatus_to_exitcode(got["status"])
        result["exit_code"] = code
        return result

    def start_kernel(self):
        req_r, req_w = os.pipe()
        done_r, done_w = os.pipe()
        argv = [*self.python_argv, "-q", "-c", self.kernel_source]
        env = dict(self.env, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        try:
            pid, out_r, err_r = self.spawn(argv, env, extra_fds=(req_r, done_w))
        except OSError:
            for fd in (req_r, req_w, done_r, done_w):
                os.close(fd)
            raise
        os.close(req_r)
        os.close(done_w)
        os.set_blocking(req_w, False)  # written inside the call's loop (collect's feed)
        self.kernel = (pid, req_w, done_r, out_r, err_r)

    def op_python(self, req):
        if self.kernel is None:
            try:
                self.start_kernel()
            except OSError as exc:
                return not_started(exc)
        pid, req_w, done_r, out_r, err_r = self.kernel
        self.cells += 1
        cell = req["cell"] = self.cells
        base = self.baseline()
        drain(done_r)  # what the last cell wrote there itself is stale (read while it is stopped)
        try:
            os.kill(pid, signal.SIGCONT)  # stopped since the last call
        except OSError:
            pass  # the kernel is gone; collect() sees it exit
        request = (json.dumps({"code": req["code"], "cell": cell}) + "\n").encode()
        got = self.collect(pid, out_r, err_r, req, done_fd=done_r, base=base, feed=(req_w, request))
        restarted = bool(got["reason"])
        exit_code = None
        if restarted:  # a limit, a flooded control pipe, or the kernel died: it is restarted
            self.kill_others(keep_kernel=False)
            self.drop_kernel()
            if got["status"] is not None and got["reason"] == "died":
                exit_code = os.waitstatus_to_exitcode(got["status"])
        else:
            exit_code = 0 if got["done"] and got["done"].get("ok") else 1
        result = self.finish(got, keep_kernel=True)
        if got["reason"] == "died":
            result["reason"] = "died"
        result["exit_code"] = exit_code
        result["kernel_restarted"] = restarted or result["kernel_restarted"]
        return result

    # ---- files --------------------------------------------------------------------------
    def resolve(self, path):
        return path if path.startswith("/") else os.path.join(self.workspace, path)

    def op_write(self, req):
        path = self.resolve(req["path"])
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        data = base64.b64decode(req["data"])
        write_new(path, data, int(req.get("mode", 0o644)))
        return {"bytes": len(data)}

    def op_read(self, req):
        data = read_regular(self.resolve(req["path"]), int(req["max_bytes"]), req["path"])
        return {"data": base64.b64encode(data).decode()}

    def op_untar(self, req):
        dest = os.path.normpath(self.resolve(req["dest"]))
        return {"files": untar(dest, base64.b64decode(req["data"]))}

    def op_usage(self, req):
        st = os.statvfs(self.workspace)
        return {"disk_bytes": (st.f_blocks - st.f_bfree) * st.f_frsize}

    def op_kill(self, req):
        self.kill_others(keep_kernel=False)
        self.drop_kernel()
        return {}

    def op_digest(self, req):
        limit = int(req["max_bytes"])
        if "root" in req:
            root = self.resolve(req["root"])
            paths = sorted(walk_files(root, req["suffix"], set(req.get("skip", ()))))
            shown = [os.path.relpath(p, root) for p in paths]
        else:
            paths = [self.resolve(p) for p in req["paths"]]
            shown = list(req["paths"])
        return {"digests": {name: digest(path, limit) for path, name in zip(paths, shown)}}

    def op_ping(self, req):
        return {"pong": True}

    def handle(self, req):
        op = req.get("op")
        method = getattr(self, f"op_{op}", None)
        if method is None:
            return {"error": f"unknown op {op!r}", "kind": "ValueError"}
        try:
            return method(req)
        except (OSError, ValueError, tarfile.TarError, KeyError) as exc:
            return {
                "error": (exc.strerror if isinstance(exc, OSError) else None) or str(exc),
                "kind": type(exc).__name__,
                "errno": getattr(exc, "errno", None),
            }


def main():
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_DUMPABLE, 0)  # programs run as our uid: no ptrace of us, no /proc/1/mem
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if os.getpid() != 1:  # it kills every process it can see: only ever in its own pid ns
        sys.stderr.write("session agent: refusing to run outside a fresh pid namespace\n")
        sys.exit(2)
    stdin = sys.stdin.buffer
    first = stdin.readline()
    if not first:
        return
    config = json.loads(first)
    agent = Agent(config)
    os.makedirs(agent.workspace, exist_ok=True)
    os.makedirs(STATE_DIR, exist_ok=True)
    if config.get("seed"):
        copy_tree(*config["seed"])
    send({"ready": True})
    try:
        while True:
            line = stdin.readline()
            if not line:
                return
            try:
                req = json.loads(line)
            except ValueError as exc:
                send({"error": f"malformed request: {exc}", "kind": "ValueError"})
                continue
            send(agent.handle(req))
    finally:
        agent.kill_others(keep_kernel=False)


if __name__ == "__main__":
    main()
