"""Whole-tree limits and accounting inside a session: the session's cgroup, or /proc without one.

Runs INSIDE the sandbox as part of the session agent (its source is sent ahead of agent.py, like
agent_files.py), standard library only. The host makes one cgroup per session
(sandbox/isolation/cgroups.py: memory, pids and CPU accounting; it writes the limits itself) and
hands the agent open fds of its control files: inherited through bubblewrap, sent over a one-shot
unix socket into a docker container. Every process the agent starts joins the group before exec
(`Group.join`), so the kernel caps the memory and process count of all of them together and
OOM-kills inside the group, and the agent reads the group's CPU time (exact and live: children
nobody waited for are in it) and its OOM-kill count. The code in the session holds none of the
fds and cannot open the root-owned files, so it can neither raise its limits nor leave the group.

Without a group (not root, remote docker hosts) `ProcTree` falls back to /proc: CPU of the live
processes plus the reaped ones, and OOM kills of the container's own memory cgroup where one is
visible (docker); bubblewrap then has per-process limits only (RLIMIT_AS, RLIMIT_NPROC).
"""

import json
import os
import resource
import signal
import socket
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OWN_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


def receive_group(path):
    """Connect to the host's unix socket and take the session group's fds (docker)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 64)
    sent = json.loads(data)
    mapping = dict(zip(sent["host_fds"], fds))
    (layout,) = sent["groups"].values()

    def local(key, value):  # the host's fd numbers -> ours; flags stay as they are
        if key in ("version", "oom_disabled") or value is None:
            return value
        return [mapping[f] for f in value] if isinstance(value, list) else mapping[value]

    return {key: local(key, value) for key, value in layout.items()}


def oom_kills(text):
    """The `oom_kill N` count of v1 memory.oom_control or v2 memory.events."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value)
    return 0


class Group:
    """The session's cgroup, through the fds the host opened."""

    def __init__(self, layout):
        self.layout = layout

    def join(self):  # in a forked child, before exec
        for fd in self.layout["procs"]:
            os.write(fd, b"0")

    def cpu(self):
        text = os.pread(self.layout["cpu"], 4096, 0).decode()
        if self.layout["version"] == 1:
            return int(text.strip() or 0) / 1e9
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "usage_usec":
                return int(value) / 1e6
        return 0.0

    def ooms(self):
        return oom_kills(os.pread(self.layout["mem_events"], 4096, 0).decode())


class ProcTree:
    """The fallback: every process but the agent, read from /proc."""

    def join(self):
        pass

    def cpu(self):
        """Reaped descendants plus every live process but the agent."""
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = usage.ru_utime + usage.ru_stime
        me = os.getpid()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += sum(int(f) for f in fields[11:15]) / CLOCK_TICKS
        return total

    def ooms(self):
        for path in OWN_OOM_FILES:
            try:
                with open(path) as fh:
                    return oom_kills(fh.read())
            except OSError:
                continue
        return 0


def all_stopped(pid):
    """Whether every thread of `pid` is stopped (or gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in "TtZX":
            return False
    return True


def stop(pid, wait_s):
    """SIGSTOP `pid` (all its threads) and wait until every thread is stopped; False when one
    is still running after `wait_s` (stuck in the kernel)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return True  # dead: the caller reaps it
    deadline = time.monotonic() + wait_s
    while not all_stopped(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def strike(pid, keep):
    """At a limit, kill the call's processes at once: under a fork storm every moment until
    the kill is CPU over the limit. The call's process group in one syscall, then one quick
    pass over /proc (no reads) for what left it; kill_others then reaps and sweeps again."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass
