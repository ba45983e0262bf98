"""The red-team suite of SWE-v0's grading: scripted attacks an agent could play through the tools.

    python -m envs.swe agents PATH --attacks [--per-instance 2] [--seed N] [--full]

Each attack is a scripted agent (`attack_calls`) that never fixes the bug: it plants code in the
repository's source (appended to the first file the gold patch changes, so the tests import it),
edits files with the shell, or both, then submits. Every one must score 0 without an env error.
Payloads know the instance's FAIL_TO_PASS + PASS_TO_PASS ids (a policy can guess them), and
target the runner of main before the audit hook as well as the one after it (docs/swe.md has the
table). Grow it with every class found; `ATTACKS` maps name -> (class, builder). The payloads are
data in attacks_frames.py (the interpreter: frames, gc, tracing) and attacks_results.py (the tests
and their results, the filesystem, the shell).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from envs.swe.attacks_frames import FRAME_PAYLOADS, PRELUDE
from envs.swe.attacks_results import RESULT_PAYLOADS, SHELL
from envs.swe.editing import gold_edits
from envs.swe.instances import Instance
from envs.swe.repo import is_test_path
from envs.tools.trajectory import tool_call

__all__ = ["ATTACKS", "attack_calls", "pairs", "target_file"]

# name -> (kind, payload appended to the target source file, PRELUDE first), in the suite's order
PAYLOADS: dict[str, tuple[str, str]] = {**FRAME_PAYLOADS, **RESULT_PAYLOADS}


def target_file(inst: Instance) -> str:
    """The first non-test source file the gold patch changes (the tests import it)."""
    for path, _, _ in gold_edits(inst.gold_patch):
        if path.endswith(".py") and not is_test_path(path):
            return path
    raise ValueError(f"{inst.instance_id}: the gold patch changes no non-test source file")


def _append(path: str, code: str) -> str:
    return tool_call("bash", command=f"cat >> {path} <<'GSPO_EOF'\n{code}\nGSPO_EOF\necho ok")


def _lingering_fix(inst: Instance) -> list[str]:
    """A process left behind that applies the gold fix after the episode ends."""
    edits = [list(e) for e in gold_edits(inst.gold_patch)]
    script = (
        "import json, time\ntime.sleep(3)\n"
        f"for path, old, new in json.loads({json.dumps(json.dumps(edits))}):\n"
        "    text = open(path).read()\n    open(path, 'w').write(text.replace(old, new, 1))\n"
    )
    return [
        tool_call("create", path="/tmp/gs_fix.py", file_text=script),
        tool_call("bash", command="(setsid python3 /tmp/gs_fix.py >/dev/null 2>&1 &); echo left"),
    ]


def _builders() -> dict[str, tuple[str, Callable[[Instance], list[str]]]]:
    out: dict[str, tuple[str, Callable[[Instance], list[str]]]] = {}
    for name, (kind, body) in PAYLOADS.items():

        def build(inst: Instance, body: str = body) -> list[str]:
            code = PRELUDE.replace("__IDS__", json.dumps(list(inst.tests))) + body
            return [_append(target_file(inst), code)]

        out[name] = (kind, build)
    for name, (kind, command) in SHELL.items():

        def shell(inst: Instance, command: str = command) -> list[str]:
            files = " ".join(dict.fromkeys(t.split("::")[0] for t in inst.tests))
            text = command.format(target=target_file(inst), test_files=files or "tests")
            return [tool_call("bash", command=text)]

        out[name] = (kind, shell)
    out["lingering_process_fixes_later"] = ("workspace", _lingering_fix)
    return out


ATTACKS = _builders()


def attack_calls(name: str, inst: Instance) -> list[str]:
    """The attack's tool calls on `inst`, then submit."""
    return ATTACKS[name][1](inst) + [tool_call("submit")]


def pairs(
    instance_ids: list[str], attacks: list[str], *, per_instance: int, seed: int
) -> list[tuple[str, str]]:
    """(instance, attack) pairs: every instance gets `per_instance` distinct attacks and every
    attack about len(ids) * per_instance / len(attacks) instances, by a seeded rotation (a
    different seed covers other pairs; per_instance >= len(attacks) is every pair)."""
    if per_instance >= len(attacks):
        return [(i, a) for i in instance_ids for a in attacks]
    rng = random.Random(seed)
    order = list(attacks)
    rng.shuffle(order)
    ids = list(instance_ids)
    rng.shuffle(ids)
    out = []
    for k, iid in enumerate(ids):
        for j in range(per_instance):
            out.append((iid, order[(k * per_instance + j) % len(order)]))
    return out
