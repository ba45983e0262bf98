"""The session's Python kernel: a persistent interpreter the agent feeds cells to.

Runs INSIDE the sandbox (``python3 -q -c <this source>``), standard library only, as a child of
the session agent. fd 3 carries requests ({"code"} per line), fd 4 gets one {"ok", "cell"} line per cell
after stdout/stderr (fds 1, 2) are flushed (the agent reads at most 64 KiB of fd 4 a cell). Globals persist across cells; a trailing expression's
repr is printed, as in a REPL. The code is the model's: it may do anything to this process,
which can only hurt its own results (the agent enforces limits and restarts a dead kernel).
"""

import ast
import json
import os
import sys
import traceback


def run_cell(code, scope):
    tree = ast.parse(code, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), scope)
    if last is not None:
        value = eval(compile(last, "<cell>", "eval"), scope)
        if value is not None:
            print(repr(value))


def main():
    requests = os.fdopen(3, "r", encoding="utf-8")
    done = 4
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    del sys.argv[1:]
    while True:
        line = requests.readline()
        if not line:
            return
        ok = True
        request = json.loads(line)
        try:
            run_cell(request["code"], scope)
        except SystemExit as exc:
            ok = exc.code in (None, 0)
            if not ok:
                print(f"SystemExit: {exc.code}", file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the cell's error is its output
            ok = False
            etype, value, tb = sys.exc_info()
            while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
                tb = tb.tb_next  # hide the kernel's own frames
            sys.stderr.write("".join(traceback.format_exception(etype, value, tb)))
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the cell may have closed or replaced it
                pass
        # a newline first: a partial line the cell left on fd 4 cannot swallow ours
        os.write(done, ("\n" + json.dumps({"ok": ok, "cell": request["cell"]}) + "\n").encode())


if __name__ == "__main__":
    main()
