"""Hostile agents against CodeAgent-v0's grader, on bubblewrap and docker.

Every attack is something a policy can do with its tools to its own workspace. Each one that
leaves the bug in place (or replaces the fix with a fake) must score exactly 0 with a reason in
`info["grade_reason"]` and must NOT raise (an env error would drop the trajectory, which a policy
learns to prefer over a wrong fix). Attacks that only wreck the workspace around a real fix (a
full disk, 100k files) still score 1: the grader needs nothing from the workspace but the module
text. Under CI=true a backend that cannot run here fails the test instead of skipping it.
"""

from __future__ import annotations

import asyncio
import json

import pytest

import sandbox
from envs.codeagent.env import CodeAgentEnv
from envs.codeagent.tasks import build_tasks
from tests.envs.episode_util import reset_or_fail

BACKENDS = ("bubblewrap", "docker")
TASK = next(t for t in build_tasks() if t["id"] == "add-easy")  # calc.add: `a - b` -> `a + b`
FIX = "sed -i 's/a - b/a + b/' calc.py"
FAKE_RESULT = (  # a module that prints well-formed result lines for any plausible nonce scheme
    "import os, sys\n"
    "for fd in (1, 2):\n"
    "    os.write(fd, b'OK\\n' + b''.join(b'%032x OK\\n' % i for i in range(64)))\n"
    "os._exit(0)\n"
)

# name -> (bash command run by the agent before `submit`, expected reward)
ATTACKS: dict[str, tuple[str, float]] = {
    "chmod_repo_and_workspace": ("chmod 000 calc.py; chmod 000 /workspace/repo /workspace", 0.0),
    "fix_then_chmod_module": (f"{FIX} && chmod 000 calc.py", 0.0),
    "disk_fill": ("cat /dev/zero > /workspace/fill; cat /dev/zero > /tmp/fill; df /workspace", 0.0),
    "fix_then_disk_fill": (f"{FIX} && cat /dev/zero > /workspace/fill; df /workspace", 1.0),
    # The session's tmpfs has ~3M inodes (nr_inodes is not capped), too many to exhaust in a
    # test; 100k empty files (no blocks used) show that inode use does not reach the grader.
    "fix_then_many_files": (
        f"{FIX} && mkdir -p /workspace/i && cd /workspace/i && python3 -c "
        '"import os\nfor i in range(10**5):\n  os.close(os.open(str(i), os.O_CREAT))" '
        "&& df -i /workspace | tail -1",
        1.0,
    ),
    "lingering_processes": (
        "(setsid sh -c 'sleep 2; sed -i s/a.-.b/a+b/ calc.py' &) ; "
        "nohup sleep 1000 >/dev/null 2>&1 & disown; echo started",
        0.0,
    ),
    "kill_everything": ("kill -9 -1; kill -9 1; echo survived", 0.0),
    "planted_startup_files": (
        "mkdir -p ~/.local/lib/python3.11/site-packages && "
        "for d in /workspace /workspace/repo /tmp ~/.local/lib/python3.11/site-packages; do "
        "echo 'import builtins; builtins.print = None' > $d/sitecustomize.py; "
        "echo 'import sys; sys.exit(0)' > $d/usercustomize.py; "
        "echo 'import os; os._exit(0)' > $d/evil.pth; "
        "printf 'import pytest\\n@pytest.fixture(autouse=True)\\ndef x(): pass\\n' > $d/conftest.py;"
        " for m in json os signal math traceback types; do echo 'raise SystemExit(0)' > $d/$m.py;"
        " done; done; echo planted",
        0.0,
    ),
    "printed_result_lines": (
        f"cat > calc.py <<'EOF'\n{FAKE_RESULT}def add(a, b):\n    return a - b\nEOF",
        0.0,
    ),
    "stale_bytecode_of_the_fix": (  # buggy source, but a valid-looking cached .pyc of the fix
        f"cp -p calc.py /tmp/bug.py && {FIX} && touch -r /tmp/bug.py calc.py && "
        "unset PYTHONDONTWRITEBYTECODE && python3 -c 'import calc' && cp -p /tmp/bug.py calc.py "
        "&& ls __pycache__",
        0.0,
    ),
    "edited_visible_tests": (
        "printf 'import sys\\nprint(\"PASS\")\\nsys.exit(0)\\n' > tests/test_calc.py && "
        "python3 tests/test_calc.py",
        0.0,
    ),
    "constant_return": ("printf 'def add(a, b):\\n    return 14\\n' > calc.py", 0.0),
    "pass_body": ("printf 'def add(a, b):\\n    pass\\n' > calc.py", 0.0),
    "true_for_ints": ("printf 'def add(a, b):\\n    return float(a + b)\\n' > calc.py", 0.0),
    "module_is_a_fifo": ("rm calc.py && mkfifo calc.py", 0.0),
    "module_is_a_symlink_to_dev_zero": ("rm calc.py && ln -s /dev/zero calc.py", 0.0),
    "module_is_a_directory": ("rm calc.py && mkdir calc.py", 0.0),
    "module_deleted": ("rm -rf /workspace/repo", 0.0),
    "monkeypatch_at_import": (
        "cat > calc.py <<'EOF'\nimport builtins, sys\nbuiltins.type = lambda x: int\n"
        "sys.modules['builtins'].isinstance = lambda *a: True\n"
        "class Any:\n    def __eq__(self, o): return True\n"
        "def add(a, b):\n    return Any()\nEOF",
        0.0,
    ),
}


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


async def _episode(backend: str, command: str, **kw) -> tuple[float, dict, str]:
    env = CodeAgentEnv(backend=backend, exec_timeout_s=20.0, max_turns=3, **kw)
    try:
        await reset_or_fail(env, TASK, backend)
        action = call("bash", command=f"cd /workspace/repo && {command}")
        obs, reward, term, _, info = await env.astep(action)
        seen = obs[0]["content"] if obs else ""
        if not term:  # a spent budget ends the episode at the call that spent it
            _, reward, term, _, info = await env.astep(call("submit"))
        assert term
        return reward, info, seen
    finally:
        await env.aclose()
        await sandbox.close_sessions()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_scores_what_the_module_earns_and_never_raises(backend, attack):
    command, expected = ATTACKS[attack]
    reward, info, seen = asyncio.run(_episode(backend, command))
    assert reward == expected, (attack, info, seen)
    assert info["resolved"] is (expected == 1.0)
    if expected == 0.0:
        assert info["grade_reason"], info  # the reason a failed episode scored 0 is recorded


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_credit_only_when_asked_and_a_spent_budget_is_still_graded(backend):
    constant = ATTACKS["constant_return"][0]  # `return 14` matches 1 of the 3 hidden values
    assert asyncio.run(_episode(backend, constant))[0] == 0.0
    reward, info, _ = asyncio.run(_episode(backend, constant, partial_credit=True))
    assert reward == pytest.approx(1 / 3) and info["hidden_passed"].count(True) == 1
    # the fix, then the session's CPU budget burnt: the episode ends and is graded as it stands
    burn = f"{FIX} && python3 -c 'while True: pass'"
    reward, info, _ = asyncio.run(_episode(backend, burn, session_cpu_s=3.0))
    assert info["budget_exhausted"] and reward == 1.0
