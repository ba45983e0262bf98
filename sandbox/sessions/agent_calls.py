"""What one call of the session agent is made of, outside the agent's state: the shell wrapper of an
exec, the reader of the kernel's "cell done" pipe, the CPU poll schedule, and the replies and
drains of calls that cannot run normally.

Runs INSIDE the sandbox as part of the session agent (its source is sent ahead of agent.py, like
agent_files.py and agent_limits.py), standard library only; on the host agent.py imports these
from here. Everything a call's code can write to (the control pipe, its output pipes) is read
here bounded: see agent.py's docstring.
"""

import json
import os

POLL_S = 0.02
CONTROL_BYTES = 64 << 10  # what a call may write to the kernel's "cell done" pipe (fd 4)
CONTROL_LINE_BYTES = 256  # the kernel's own line is ~30 bytes: longer lines are not parsed

# bash -c WRAPPER: restore the saved cwd and exports, run $GSPO_COMMAND, save them again on exit.
WRAPPER = r"""
__gspo_s=/tmp/.gspo-shell
[ -r "$__gspo_s/env" ] && . "$__gspo_s/env" >/dev/null 2>&1
if [ -r "$__gspo_s/cwd" ] && IFS= read -r __gspo_d < "$__gspo_s/cwd"; then
  cd -- "$__gspo_d" 2>/dev/null || cd -- "$HOME"
fi
__gspo_save() {
  [ -d "$__gspo_s" ] || mkdir -p "$__gspo_s" 2>/dev/null
  { export -p > "$__gspo_s/env"; printf '%s\n' "$PWD" > "$__gspo_s/cwd"; } 2>/dev/null
}
trap __gspo_save EXIT
__gspo_c=$GSPO_COMMAND
unset GSPO_COMMAND __gspo_d
eval "$__gspo_c"
"""


def cpu_poll_s(left, spent, elapsed):
    """When to read the call's CPU next: every POLL_S, and sooner as the limit nears (half the
    time the current burn rate needs to reach it, 1 ms at least), so that a tree burning
    every core overshoots its limit by about a millisecond of CPU per core, not a poll's worth."""
    rate = spent / elapsed if elapsed > 0 else 0.0
    if rate <= 0:
        return POLL_S
    return min(POLL_S, max(0.001, left / rate / 2))


class DoneReader:
    """The kernel's "cell done" pipe of one call, read once: complete lines are parsed as they
    arrive (each byte is looked at once), a partial one is kept up to CONTROL_LINE_BYTES, and
    past CONTROL_BYTES in all `over` is set and nothing more is kept."""

    def __init__(self, cell):
        self.cell, self.total, self.over = cell, 0, False
        self.partial, self.skipping = b"", False  # skipping: the rest of an over-long line
        self.msg = None

    def feed(self, chunk):
        """The done message for this cell once one arrived (else None)."""
        self.total += len(chunk)
        if self.total > CONTROL_BYTES:
            self.over, self.partial = True, b""
            return None
        start = 0
        while self.msg is None:
            end = chunk.find(b"\n", start)
            if end < 0:
                self.keep(chunk[start:])
                break
            line, self.partial = self.partial + chunk[start:end], b""
            if not self.skipping:
                self.msg = parse_done(line, self.cell)
            self.skipping, start = False, end + 1
        return self.msg

    def keep(self, rest):
        if self.skipping or len(self.partial) + len(rest) > CONTROL_LINE_BYTES:
            self.partial, self.skipping = b"", True
        else:
            self.partial += rest


def parse_done(line, cell):
    """The kernel's {"ok", "cell"} message for this cell, if `line` is one. The cell's own code
    could write such lines too: it can only misreport itself."""
    if len(line) > CONTROL_LINE_BYTES:
        return None
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if isinstance(msg, dict) and msg.get("cell") == cell and "ok" in msg:
        return msg
    return None


def not_started(exc):
    """A call that could not start (fork failed: the process cap is held by the session's own
    threads or processes): the session's doing, so a result, not an error."""
    return {
        "exit_code": None,
        "stdout": "",
        "stderr": f"agent: could not start the command: {exc.strerror or exc}",
        "stdout_cut": 0,
        "stderr_cut": 0,
        "wall_s": 0.0,
        "cpu_s": 0.0,
        "reason": "",
        "kernel_restarted": False,
        "message": "not started: the session's processes and threads are at its process cap",
    }


def drain(fd):
    """Empty a pipe whose writers are stopped: bounded by the pipe's capacity (1 MiB at most
    for an unprivileged writer), so a writer cannot keep us here."""
    os.set_blocking(fd, False)
    try:
        for _ in range(64):
            if not os.read(fd, 1 << 16):
                break
    except OSError:
        pass
    finally:
        os.set_blocking(fd, True)
