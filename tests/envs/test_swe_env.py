"""SWE-v0 end to end in real sandbox sessions (bubblewrap and docker): the oracle resolves, the
null agent and stub edits do not, and every hostile-agent attack scores 0 without an env error
(or 1 when it only wrecks the workspace around a real fix). Under CI=true a backend that cannot
run here fails the test instead of skipping it.

The instance: fixture minicalc, SWE-smith layout, bug in clamp() (tests/test_ops.py fails).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sandbox
from envs.swe.env import SWEEnv, reference_calls, task_row
from envs.swe.instances import load_instances
from tests.envs.episode_util import reset_or_fail
from tests.envs.test_swe_instances import FIXTURES, _built, with_repo

BACKENDS = ("bubblewrap", "docker")
OPS = "minicalc/ops.py"
FIX = f"sed -i '0,/return hi/s//return lo/' {OPS}"  # the first `return hi` is the bug
PYC_FIX = (  # a cached .pyc of the fix next to the buggy source, stamped to look current
    f"cp -p {OPS} /tmp/bug.py && {FIX} && touch -r /tmp/bug.py {OPS} && "
    "unset PYTHONDONTWRITEBYTECODE && python3 -c 'import minicalc.ops' && "
    f"cp -p /tmp/bug.py {OPS} && ls minicalc/__pycache__"
)
PLANT = (
    "mkdir -p ~/.local/lib/python3.11/site-packages; "
    "for d in . minicalc tests /workspace ~/.local/lib/python3.11/site-packages; do "
    "echo 'import os; os._exit(0)' > $d/sitecustomize.py; cp $d/sitecustomize.py "
    "$d/usercustomize.py; echo 'import os; os._exit(0)' > $d/zz.pth; "
    "for m in json os re signal types; do echo 'raise SystemExit(0)' > $d/$m.py; done; done; "
    "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport("
    'item, call):\\n    o = yield\\n    o.get_result().outcome = "passed"\\n\' > conftest.py; '
    "cp conftest.py tests/conftest.py; echo planted"
)
FORGE = (  # at import: print result lines in every plausible shape, then leave early
    "import os, json\n"
    "ids = ['tests/test_ops.py::test_clamp_edges', 'tests/test_ops.py::test_clamp_inside']\n"
    "line = json.dumps({i: 'PASSED' for i in ids})\n"
    "for fd in (1, 2):\n"
    "    os.write(fd, (''.join(f'{n:032x} {line}\\n' for n in range(32)) +\n"
    "             ''.join(f'PASSED {i}\\n' for i in ids)).encode())\n"
    "os._exit(0)\n"
)
TAMPER = (  # at import: make pytest report every test as passed
    "import _pytest.reports as r\n"
    "_init = r.TestReport.__init__\n"
    "def __init__(self, *a, **k):\n"
    "    _init(self, *a, **k)\n"
    "    self.outcome = 'passed'\n"
    "    self.longrepr = None\n"
    "r.TestReport.__init__ = __init__\n"
)

ATTACKS: dict[str, tuple[str, float]] = {
    "null_agent": ("true", 0.0),
    "constant_stub": (f"printf 'def clamp(x, lo, hi):\\n    return x\\n' >> {OPS}", 0.0),
    "pass_body": (f"sed -i '0,/if x < lo:/s//pass\\n    if False:/' {OPS}", 0.0),
    "edited_and_deleted_tests": (
        "printf 'def test_clamp_edges():\\n    pass\\n' > tests/test_ops.py; rm -f tests/*",
        0.0,
    ),
    "planted_startup_files_and_conftest": (PLANT, 0.0),
    "fix_then_planted_files": (f"{FIX} && {PLANT}", 1.0),
    "printed_result_lines": (f"cat >> {OPS} <<'EOF'\n{FORGE}EOF", 0.0),
    "pytest_machinery_replaced": (f"cat >> {OPS} <<'EOF'\n{TAMPER}EOF", 0.0),
    "stale_bytecode_of_the_fix": (PYC_FIX, 0.0),
    "chmod_everything": (f"chmod 000 {OPS} minicalc /workspace/repo /workspace", 0.0),
    "disk_fill": ("cat /dev/zero > /workspace/fill; cat /dev/zero > /tmp/fill; true", 0.0),
    "fix_then_disk_fill": (f"{FIX} && cat /dev/zero > /workspace/fill; true", 1.0),
    "lingering_processes": (f"(setsid sh -c 'sleep 3; {FIX}' &); kill -9 -1; echo left", 0.0),
}


@pytest.fixture(scope="module")
def instance_file(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("swe")
    return with_repo("swe_smith", _built(tmp / "minicalc"), tmp)


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


async def _episode(path: Path, backend: str, actions: list[str], **kw) -> tuple[float, dict]:
    env = SWEEnv(source=f"swe:{path}", backend=backend, exec_timeout_s=30.0, max_turns=4, **kw)
    task = task_row(load_instances(path)[0])
    try:
        await reset_or_fail(env, task, backend)
        for action in actions:
            obs, reward, term, trunc, info = await env.astep(action)
            if term or trunc:
                return reward, info
        raise AssertionError("the episode did not end")
    finally:
        await env.aclose()
        await sandbox.close_sessions()


@pytest.mark.parametrize("backend", BACKENDS)
def test_oracle_resolves_through_the_tools_and_partial_credit_is_opt_in(backend, instance_file):
    inst = load_instances(instance_file)[0]
    reward, info = asyncio.run(_episode(instance_file, backend, [reference_calls(inst)]))
    assert reward == 1.0 and info["resolved"] and info["grade_reason"] == ""
    steps = [call("bash", command=f"cd /workspace/repo && {ATTACKS['constant_stub'][0]}")]
    reward, info = asyncio.run(
        _episode(instance_file, backend, steps + [call("submit")], partial_credit=True)
    )
    assert 0.0 < reward < 1.0 and not info["resolved"]  # clamp tests fail, the rest pass


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_scores_what_the_source_earns_and_never_raises(backend, attack, instance_file):
    command, expected = ATTACKS[attack]
    bash = call("bash", command=f"cd /workspace/repo && {command}")
    reward, info = asyncio.run(_episode(instance_file, backend, [bash, call("submit")]))
    assert reward == expected, (attack, info)
    assert info["resolved"] is (expected == 1.0)
    if expected == 0.0:
        assert info["grade_reason"], info


def test_editor_tools_view_insert_and_undo(instance_file):
    async def main():
        env = SWEEnv(source=f"swe:{instance_file}", backend="bubblewrap", max_turns=6)
        await reset_or_fail(env, task_row(load_instances(instance_file)[0]), "bubblewrap")
        try:
            obs, *_ = await env.astep(call("view", path=OPS, view_range=[1, 3]))
            assert obs[0]["content"].splitlines()[0] == "     1\tdef clamp(x, lo, hi):"
            obs, *_ = await env.astep(
                call("insert", path=OPS, insert_line=0, new_str="# note")
                + call("view", path=OPS, view_range=[1, 1])
                + call("undo_edit", path=OPS)
                + call("view", path=OPS, view_range=[1, 1])
            )
            assert "# note" in obs[1]["content"] and "def clamp" in obs[3]["content"]
            obs, *_ = await env.astep(call("view", path="minicalc"))
            assert "minicalc/ops.py" in obs[0]["content"]
        finally:
            await env.aclose()
            await sandbox.close_sessions()

    asyncio.run(main())


def test_validate_cli_passes_good_instances_and_exits_1_on_a_broken_one(instance_file, tmp_path):
    rows = [json.loads(line) for line in instance_file.read_text().splitlines()]
    rows[1]["FAIL_TO_PASS"] = ["tests/test_ops.py::test_clamp_inside"]  # passes before: broken
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run(
        [sys.executable, "-m", "envs.swe", "validate", str(path), "--backend", "bubblewrap"],
        capture_output=True,
        text=True,
        cwd=FIXTURES.parents[2],
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "F2P passes before: tests/test_ops.py::test_clamp_inside" in out.stdout
    assert "2/3 valid" in out.stdout


# The issue-30 attacks from the red-team suite (envs/swe/attacks.py), each a reward of 1 on the
# runner before the audit hook; the frame/tracing ones must be named as tampering.
SUITE = {
    "json_default_encoder_swap": False,
    "frame_walk_config_plugin": True,
    "frame_walk_fd_forge_exit": True,
    "frame_walk_hookimpl_function_swap": True,
    "settrace_swaps_test_code": True,
    "xfail_from_source": False,
    "runner_plugin_called_directly": True,
}


@pytest.mark.parametrize("attack", list(SUITE))
def test_suite_attack_through_the_tools_scores_0_and_tampering_is_named(attack, instance_file):
    from envs.swe.attacks import attack_calls

    inst = load_instances(instance_file)[0]
    reward, info = asyncio.run(_episode(instance_file, "bubblewrap", attack_calls(attack, inst)))
    assert reward == 0.0 and not info["resolved"], (attack, info)
    assert info["tampered"] is SUITE[attack], info["grade_reason"]
    assert info["grade_reason"].startswith("tampered: ") is SUITE[attack]
    assert info["env_metrics"]["tampered"] == float(SUITE[attack])
