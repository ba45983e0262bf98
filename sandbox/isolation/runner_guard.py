"""Runner-side integrity: syscall filter, whole-tree accounting, and cleaning a warm sandbox.

Like runner.py this runs INSIDE the sandbox (standard library only; backends/base.py ships it
into the sandbox next to the runner as the module `sandbox.isolation.runner_guard`). Three parts:

* `install_seccomp()`: a seccomp BPF filter, built here from a syscall table (no libseccomp),
  that every program and compiler process gets before exec. It denies io_uring, the key
  management calls, bpf, perf_event_open, userfaultfd, ptrace and process_vm_*, every mount and
  namespace call (and clone() with a CLONE_NEW* flag), module and kexec loading, and foreign
  syscall ABIs. The filter is inherited across fork and exec and cannot be removed.
* `Tree`: the resources of one test's whole process tree. With cgroups the host made a cgroup
  for the slot and handed us open file descriptors for its files (opened by root, so writing
  works while the program, which has none of these fds and no write permission on the files,
  can neither raise its limits nor leave the group). The kernel then enforces memory (resident
  memory of all processes, OOM-kill at the limit) and process count, and we read CPU and peak
  memory from the group. Without cgroups (the documented fallback) we sample /proc every
  POLL_S: summed resident memory and CPU of every process of the run, killing the tree when
  over.
* `clean_slot()`: what a warm container (docker) must lose between runs: files in the writable
  dirs whatever their mode (we chmod before deleting), SysV shared memory, queues and
  semaphores, POSIX message queues. It reports whether the slot is verifiably clean; the host
  destroys a slot that is not.
"""

import ctypes
import errno
import os
import platform
import queue
import stat
import struct
import threading

MIB = 1 << 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_S = 0.02  # fallback sampling interval (also the cgroup CPU poll interval)

# ---- seccomp ------------------------------------------------------------------------------------
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
CLONE_NEW_MASK = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
X32_BIT = 0x40000000
# Calls that fail with EPERM. Names common to both tables use the same number on both arches
# only where the kernel's generic table says so; each arch lists its own numbers.
DENY_EPERM = (
    "keyctl add_key request_key bpf perf_event_open userfaultfd ptrace process_vm_readv "
    "process_vm_writev mount umount2 pivot_root chroot unshare setns fsopen fsconfig fsmount "
    "fspick move_mount open_tree mount_setattr kexec_load kexec_file_load init_module "
    "finit_module delete_module open_by_handle_at name_to_handle_at swapon swapoff reboot acct "
    "quotactl lookup_dcookie kcmp"
).split()
# Calls that fail with ENOSYS, so that libraries fall back (glibc's clone3 -> clone for threads).
DENY_ENOSYS = ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3")
ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
            "perf_event_open": 298, "userfaultfd": 323, "ptrace": 101,
            "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166,
            "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
            "mount_setattr": 442, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
            "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
            "name_to_handle_at": 303, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163,
            "quotactl": 179, "lookup_dcookie": 212, "kcmp": 312, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "clone3": 435, "clone": 56,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
            "perf_event_open": 241, "userfaultfd": 282, "ptrace": 117,
            "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40, "umount2": 39,
            "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
            "mount_setattr": 442, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
            "finit_module": 273, "delete_module": 106, "open_by_handle_at": 265,
            "name_to_handle_at": 264, "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89,
            "quotactl": 60, "lookup_dcookie": 18, "kcmp": 272, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "clone3": 435, "clone": 220,
        },
    ),
}  # fmt: skip


def seccomp_program(machine=None):
    """The filter as packed `struct sock_filter` instructions (8 bytes each)."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise OSError(f"no seccomp syscall table for architecture {machine!r}")
    audit_arch, nr = ARCHES[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    code = [(ld, 0, 0, 4), (jeq, 0, "nosys", audit_arch), (ld, 0, 0, 0)]
    if machine == "x86_64":
        code.append((jge, "nosys", 0, X32_BIT))
    code += [(jeq, "eperm", 0, nr[name]) for name in DENY_EPERM]
    code += [(jeq, "nosys", 0, nr[name]) for name in DENY_ENOSYS]
    code += [(jeq, 0, "allow", nr["clone"]), (ld, 0, 0, 16), (jset, "eperm", 0, CLONE_NEW_MASK)]
    labels = {"allow": len(code), "eperm": len(code) + 1, "nosys": len(code) + 2}
    code += [
        (ret, 0, 0, RET_ALLOW),
        (ret, 0, 0, RET_ERRNO | errno.EPERM),
        (ret, 0, 0, RET_ERRNO | errno.ENOSYS),
    ]
    out = bytearray()
    for i, (op, jt, jf, k) in enumerate(code):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        out += struct.pack("=HBBI", op, jt, jf, k)
    return bytes(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_FILTER: list = []  # [(libc, buffer, fprog)], built once per runner before any fork


def prepare_seccomp():
    """Build the filter and load libc in the runner, so a forked child only makes two calls."""
    if not _FILTER:
        program = seccomp_program()
        buf = ctypes.create_string_buffer(program, len(program))
        fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
        _FILTER.append((ctypes.CDLL(None, use_errno=True), buf, fprog))


def install_seccomp():
    """Set no-new-privs and load the filter into the calling process; raises OSError."""
    prepare_seccomp()
    libc, _, fprog = _FILTER[0]
    ulong = ctypes.c_ulong
    if libc.prctl(PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    prog = ctypes.byref(fprog)
    if libc.prctl(PR_SET_SECCOMP, ulong(SECCOMP_MODE_FILTER), prog, ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


# (everything above stands alone: session agents run it, sandbox/sessions/backends/base.py)
# ---- whole-tree accounting ----------------------------------------------------------------------
def _pread(fd):
    return os.pread(fd, 4096, 0).decode()


def _write(fd, value):
    os.pwrite(fd, str(value).encode(), 0)


def _field(text, key):
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class GroupThread:
    """A runner thread that lives in a cgroup v1 group (v1 places threads, not only processes),
    so that the children it forks start inside the group. Moving a fresh child in instead costs
    an RCU grace period per test (measured: 12.5 ms on a loaded 2-core host, in every test's
    wall time); this thread moves once per runner, while the compiler runs.

    It stays in the group while tests run, so it counts as one task (pids.max is one higher)
    and the kernel OOM killer could pick the runner: the host disables it for this group
    (memory.oom_control), tasks at the limit wait instead, and Tree.sample sees `under_oom`
    within POLL_S and kills the tree (MLE)."""

    def __init__(self, group):
        self.group = group
        self.ready = threading.Event()
        self.ok = False
        self.requests = queue.Queue()
        self.replies = queue.Queue()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            for fd in self.group["tasks"]:
                os.write(fd, b"0")  # 0: the writing thread
            self.ok = True
        except OSError:
            pass
        self.ready.set()
        while True:
            child = self.requests.get()
            try:
                pid = os.fork()
            except OSError as exc:
                self.replies.put(exc)
                continue
            if pid == 0:
                child()  # never returns
            self.replies.put(pid)

    def fork(self, child):
        self.requests.put(child)
        reply = self.replies.get()
        if isinstance(reply, BaseException):
            raise reply
        return reply


_THREADS: dict = {}  # id(group) -> GroupThread, one per group for the runner's lifetime


def prepare(group):
    """Start the group's forking thread early (its move into the group overlaps compiling)."""
    if group is not None and group.get("tasks") and group.get("oom_disabled"):
        if id(group) not in _THREADS:
            _THREADS[id(group)] = GroupThread(group)


class Tree:
    """One test's process tree, measured and limited as a whole.

    `group` is the host's description of the slot's cgroup for this phase: {"version": 1|2,
    "procs": [fd, ...], "tasks": [fd, ...] (v1), "oom_disabled", "mem_max", "swap_max",
    "mem_peak", "mem_stat", "mem_events", "pids_max", "cpu"} (fds, or None where a file does
    not exist). None: the /proc fallback.
    """

    def __init__(self, group, kill_all, lim):
        self.group, self.kill_all, self.lim = group, kill_all, lim
        self.mem_limit = int(lim["memory_mb"] * MIB)
        self.peak_bytes = 0
        self.oom_base = 0
        self.cpu_base = 0.0
        self.peak_resettable = True
        self.saw_oom = False
        self.thread = None
        if group is not None and id(group) in _THREADS:
            thread = _THREADS[id(group)]
            thread.ready.wait()
            self.thread = thread if thread.ok else None
        self.forked_in_group = False

    def fork(self, child):
        """Fork a child that runs `child()` (which must not return); return its pid."""
        if self.thread is not None:
            self.forked_in_group = True
            return self.thread.fork(child)
        pid = os.fork()
        if pid == 0:
            child()
        return pid

    # Runs in the runner, before the fork.
    def begin(self):
        g = self.group
        if g is None:
            return
        limit = self.mem_limit
        if g.get("swap_max") is None:
            _write(g["mem_max"], limit)
        else:  # v1 with swap accounting: memsw >= memory at every moment, and no swap use
            try:
                _write(g["mem_max"], limit)
            except OSError:  # raising above the current memsw limit: raise memsw first
                _write(g["swap_max"], limit)
                _write(g["mem_max"], limit)
            _write(g["swap_max"], limit)
        if g.get("pids_max") is not None:
            processes = self.lim.get("processes")
            extra = 1 if self.thread is not None else 0  # the forking thread is a task too
            _write(g["pids_max"], processes + extra if processes else "max")
        try:
            if g.get("mem_peak") is not None:
                _write(g["mem_peak"], 0 if g["version"] == 1 else "reset")
        except OSError:  # v2 before Linux 6.12 cannot reset memory.peak: peak since creation
            self.peak_resettable = False
        self.oom_base = self._ooms()
        self.cpu_base = self._cgroup_cpu()

    # Runs in the forked child, before exec: join every controller's group (unless forked by
    # the group's thread, inside it already).
    def join(self):
        if self.group is not None and not self.forked_in_group:
            for fd in self.group["procs"]:
                os.write(fd, b"0")

    def _ooms(self):  # v1 memory.oom_control and v2 memory.events both have "oom_kill N"
        return _field(_pread(self.group["mem_events"]), "oom_kill")

    def _cgroup_cpu(self):
        g = self.group
        if g["version"] == 1:
            return int(_pread(g["cpu"]).strip() or 0) / 1e9
        return _field(_pread(g["cpu"]), "usage_usec") / 1e6

    # Runs in the runner while the test runs: (cpu_s, over_memory).
    def sample(self, leader):
        if self.group is not None:
            if self.group.get("oom_disabled"):  # at the limit, tasks wait: we kill (MLE)
                self.saw_oom = (
                    self.saw_oom or _field(_pread(self.group["mem_events"]), "under_oom") > 0
                )
            return self._cgroup_cpu() - self.cpu_base, self.saw_oom
        cpu, rss = 0.0, 0
        for pid in self._pids(leader):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            cpu += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            rss += int(fields[21]) * PAGE
        self.peak_bytes = max(self.peak_bytes, rss)
        return cpu, rss > self.mem_limit

    def _pids(self, leader):
        me = os.getpid()
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
        if self.kill_all:  # alone in our pid namespace: every other process is the test's
            return pids
        try:
            session = os.getsid(leader)
        except OSError:
            return []
        return [p for p in pids if _sid(p) == session]

    # Runs in the runner after the tree was killed and reaped: (peak_mb, oom_killed).
    def finish(self, leader_maxrss_kb):
        peak = max(self.peak_bytes, leader_maxrss_kb * 1024)
        oom = False
        g = self.group
        if g is not None:
            oom = self._ooms() > self.oom_base or self.saw_oom
            text = _pread(g["mem_stat"])
            if g["version"] == 1:  # usage counts page cache: take away what is not anon/tmpfs
                cache = _field(text, "total_cache") - _field(text, "total_shmem")
            else:
                cache = _field(text, "file") - _field(text, "shmem")
            if g.get("mem_peak") is not None and self.peak_resettable:
                peak = max(peak, int(_pread(g["mem_peak"]).strip() or 0) - max(cache, 0))
        return peak / MIB, oom


def _sid(pid):
    try:
        return os.getsid(pid)
    except OSError:
        return -1


# ---- cleaning a warm slot -----------------------------------------------------------------------
IPC_RMID = 0
SYSV = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))


def clean_slot(dirs):
    """Empty `dirs` (whatever the modes inside) and remove SysV IPC objects; True if clean."""
    for directory in dirs:
        _empty_dir(directory)
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, call in SYSV:
        for ipc_id in _sysv_ids(kind):
            if kind == "sem":
                getattr(libc, call)(ipc_id, 0, IPC_RMID)
            else:
                getattr(libc, call)(ipc_id, IPC_RMID, None)
    leftovers = [d for d in dirs if _listdir(d)]
    leftovers += [kind for kind, _ in SYSV if _sysv_ids(kind)]
    return not leftovers, leftovers


def _listdir(path):
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []
    except OSError:
        return ["<unreadable>"]


def _empty_dir(directory):
    for name in _listdir(directory):
        remove_tree(os.path.join(directory, name))


def remove_tree(path):
    """Delete a file or a directory tree, whatever modes the program left on it (iterative:
    a hostile tree may be deeper than Python's recursion limit; what cannot be removed, such as
    a path past PATH_MAX, stays and makes clean_slot report the slot dirty)."""
    stack = [(path, False)]
    while stack:
        current, emptied = stack.pop()
        try:
            st = os.lstat(current)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            try:
                os.unlink(current)
            except OSError:
                pass
        elif emptied:
            try:
                os.rmdir(current)
            except OSError:
                pass
        else:
            try:  # a program may leave 0555 or 0000 dirs: make them ours to list and empty
                os.chmod(current, 0o700)
            except OSError:
                pass
            stack.append((current, True))
            stack.extend((os.path.join(current, n), False) for n in _listdir(current))


def _sysv_ids(kind):
    try:
        with open(f"/proc/sysvipc/{kind}") as fh:
            rows = fh.read().splitlines()[1:]
    except OSError:
        return []
    col = 1  # key, then id, in every table
    return [int(r.split()[col]) for r in rows if r.split()]
