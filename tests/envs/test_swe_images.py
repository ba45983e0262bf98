"""SWE instances in their own docker image, and per-repository dependency images (real docker).

A "published-style" image is built here, offline, from the sandbox base (swe_image_util): a
shipped instance's repository (inflection, with its injected bug) at /testbed and a python env
with pytest at SWE-bench's /opt/miniconda3/envs/testbed. The instance is written as SWE-bench
publishes it (no image field, no repo_path: the harness's image name is derived from its id).
Shown: `validate` passes on it, the oracle resolves and the null agent does not, hostile agents
score 0 (or 1 around a real fix) without an env error, the session keeps the default image's
isolation with a writable, capped /testbed, bubblewrap refuses with the fix named; and a
repo_path instance whose repository declares a dependency runs on an image built once per
content hash (the second build is a cache hit) where that dependency imports. Under CI=true a
missing docker engine fails these tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
from pathlib import Path

import pytest

import sandbox
from envs.swe.env import SWEEnv, reference_calls, task_row
from envs.swe.images import build_deps_image, docker_problem
from envs.swe.instances import Instance, load_instances
from envs.swe.repo import materialize
from envs.swe.validate import validate
from sandbox.errors import SandboxUnavailable
from sandbox.sessions.api import SessionLimits
from tests.envs.swe_image_util import published_image, remove_images, swe_bench_row
from tests.envs.test_swe_instances import FIXTURES, with_repo

SHIPPED = Path(__file__).resolve().parents[2] / "envs/swe/data/instances.jsonl"
SOURCE = "inflection/__init__.py"


def _need_docker() -> None:
    problem = docker_problem()
    if problem is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"docker is needed here: {problem}")
        pytest.skip(f"docker is not usable: {problem}")


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """An instance file with one SWE-bench row whose image exists only on the local engine."""
    _need_docker()
    from sandbox.sessions.images import prepare_image

    tmp = tmp_path_factory.mktemp("swe-image")
    shipped = next(i for i in load_instances(SHIPPED) if i.instance_id.startswith("inflection"))
    row = swe_bench_row(shipped, f"gspotest__inflection-{secrets.token_hex(4)}")
    path = tmp / "swe_bench_images.jsonl"
    path.write_text(json.dumps(row) + "\n")
    inst = load_instances(path)[0]
    assert not inst.repo_path and inst.image.startswith("swebench/sweb.eval.x86_64.gspotest_1776_")
    published_image(materialize(shipped, tmp / "testbed"), inst.image)
    yield path
    remove_images(prepare_image(inst.image).tag, inst.image)


def _inst(path: Path) -> Instance:
    return load_instances(path)[0]


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


async def _episode(path: Path, actions: list[str], **kw) -> tuple[float, dict, list]:
    env = SWEEnv(source=f"swe:{path}", backend="docker", exec_timeout_s=60.0, max_turns=4, **kw)
    seen = []
    try:
        messages, _ = await env.areset(options={"task": task_row(_inst(path))})
        seen.append(messages[0]["content"])
        for action in actions:
            obs, reward, term, trunc, info = await env.astep(action)
            seen += [o["content"] for o in obs]
            if term or trunc:
                return reward, info, seen
        raise AssertionError("the episode did not end")
    finally:
        await env.aclose()
        await sandbox.close_sessions()


def test_validate_passes_on_a_published_style_image(published):
    (result,) = asyncio.run(validate([_inst(published)], backend="docker"))
    assert result.ok, result.problems  # F2P fail on the image's tree, pass with the gold patch


def test_oracle_resolves_in_the_image_and_the_null_agent_does_not(published):
    reward, info, seen = asyncio.run(_episode(published, [reference_calls(_inst(published))]))
    assert reward == 1.0 and info["resolved"], info
    look = call(
        "bash", command="pwd; command -v python; python -c 'import pytest' && echo has-pytest"
    )
    reward, info, seen = asyncio.run(_episode(published, [look, call("submit")]))
    assert "The repository is at /testbed." in seen[0]
    assert seen[1].split()[:3] == ["/testbed", "/opt/miniconda3/envs/testbed/bin/python"] + [
        "has-pytest"
    ]
    assert reward == 0.0 and not info["resolved"] and info["grade_reason"]


PLANT = (
    "for d in . inflection /workspace; do echo 'import os; os._exit(0)' > $d/sitecustomize.py; "
    "echo 'import os; os._exit(0)' > $d/zz.pth; echo 'raise SystemExit(0)' > $d/json.py; done; "
    "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport("
    'item, call):\\n    o = yield\\n    o.get_result().outcome = "passed"\\n\' > conftest.py'
)
FORGE = (  # appended to the module under test: print result lines at import, leave early
    "import os, json\n"
    "line = json.dumps({'test_inflection.py::test_pluralize_singular[cow-kine]': 'PASSED'})\n"
    "os.write(1, (''.join(f'{n:032x} {line}\\n' for n in range(32))).encode())\n"
    "os._exit(0)\n"
)
ATTACKS = {
    "edited_tests": ("printf 'def test_x():\\n    pass\\n' > test_inflection.py", 0.0),
    "planted_startup_files_and_conftest": (PLANT, 0.0),
    "printed_result_lines": (f"cat >> {SOURCE} <<'EOF'\n{FORGE}EOF", 0.0),
    "chmod_and_fill_testbed": (
        f"chmod 000 {SOURCE} inflection; cat /dev/zero > /testbed/fill; chmod 000 /testbed",
        0.0,
    ),
    "lingering_process": ("(setsid sh -c 'sleep 3; rm -rf /testbed/*' &); echo left", 0.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attacks_in_the_image_score_0_without_an_env_error(published, attack):
    command, expected = ATTACKS[attack]
    steps = [call("bash", command=f"cd /testbed && {command}"), call("submit")]
    reward, info, _ = asyncio.run(_episode(published, steps))
    assert reward == expected and info["grade_reason"], (attack, info)


@pytest.mark.slow
def test_a_fix_with_planted_files_around_it_still_resolves(published):
    fix = reference_calls(_inst(published)).rsplit("<tool_call>", 1)[0]  # the edits, no submit
    steps = [fix, call("bash", command=f"cd /testbed && {PLANT}"), call("submit")]
    reward, info, _ = asyncio.run(_episode(published, steps))
    assert reward == 1.0 and info["resolved"], info


def test_an_image_session_keeps_the_isolation_with_a_writable_capped_testbed(published):
    from sandbox.sessions.images import prepare_image

    image = _inst(published).image
    prepared = prepare_image(image)
    limits = SessionLimits(disk_mb=32)

    async def main() -> list[str]:
        async with sandbox.session(limits, backend="docker", image=image) as ws:
            probe = await ws.exec(
                "id -u; stat -c %u /testbed/inflection/__init__.py; touch /testbed/new && "
                "echo writable; touch /etc/x 2>/dev/null || echo root-ro; "
                "grep CapEff /proc/self/status | tr -d '\\t'; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
                "for i in 1 2 3; do dd if=/dev/zero of=/testbed/f$i bs=1M count=20; done 2>&1 | "
                "grep -o 'No space left' | head -1"
            )
        await sandbox.close_sessions()
        return probe.stdout.splitlines()

    uid, owner, writable, root_ro, caps, *rest = asyncio.run(main())
    assert uid != "0" and owner == uid and writable == "writable" and root_ro == "root-ro"
    assert caps == "CapEff:0000000000000000" and rest[:-1] == ["lo"]
    assert rest[-1] == "No space left"  # the tree's size + disk_mb, not the host's disk
    assert prepared.test_python == "/opt/miniconda3/envs/testbed/bin/python"
    assert prepared.volume.startswith("gspo-interp-") and prepared.test_has_pytest


def test_prebuild_names_the_image_each_instance_runs_in(published, capsys):
    from envs.swe.__main__ import main
    from sandbox.sessions.images import prepare_image

    assert main(["prebuild", str(published), "--images", "local"]) == 0
    out = capsys.readouterr().out
    assert prepare_image(_inst(published).image).tag in out and "FAILED" not in out


def test_images_sessions_cannot_use_are_refused_naming_what_is_missing(tmp_path):
    """No /testbed (the sandbox base itself), and no python for the repository's tests (the
    agent runs on ours, whatever the image has)."""
    _need_docker()
    import subprocess

    from sandbox.errors import ImageBuildError
    from sandbox.isolation.image import ensure_image
    from sandbox.sessions.images import prepare_image

    with pytest.raises(ImageBuildError, match="has no /testbed"):
        prepare_image(ensure_image())
    (tmp_path / "testbed").mkdir()
    (tmp_path / "Dockerfile").write_text(
        f"FROM {ensure_image()}\nUSER root\nRUN rm -f /usr/bin/python3*\nCOPY testbed /testbed\n"
    )
    tag = f"gspo-test-nopython:{secrets.token_hex(4)}"
    subprocess.run(
        ["docker", "build", "-q", "--force-rm", "--network", "none", "-t", tag, str(tmp_path)],
        check=True,
    )
    try:
        with pytest.raises(ImageBuildError, match="has no python for the repository's tests"):
            prepare_image(tag)
    finally:
        remove_images(tag)


@pytest.mark.slow
def test_a_swe_smith_row_gets_its_bug_applied_in_the_image(tmp_path):
    """The image holds the clean repository (as SWE-smith's do): the row's patch introduces the
    bug in the session, for the agent and again in the grader's session."""
    _need_docker()
    from sandbox.sessions.images import prepare_image

    shipped = next(i for i in load_instances(SHIPPED) if i.instance_id.startswith("parse"))
    image = f"gspo-test-smith:{secrets.token_hex(4)}"
    published_image(Path(shipped.repo_path), image)
    row = {
        "instance_id": shipped.instance_id,
        "repo": shipped.repo,
        "patch": shipped.bug_patch,
        "FAIL_TO_PASS": list(shipped.fail_to_pass),
        "PASS_TO_PASS": list(shipped.pass_to_pass),
        "image_name": image,
        "problem_statement": shipped.problem_statement,
    }
    path = tmp_path / "swe_smith_images.jsonl"
    path.write_text(json.dumps(row) + "\n")
    try:
        assert _inst(path).schema == "swe-smith" and _inst(path).bug_patch
        (result,) = asyncio.run(validate([_inst(path)], backend="docker"))
        assert result.ok, result.problems
        reward, info, _ = asyncio.run(_episode(path, [reference_calls(_inst(path))]))
        assert reward == 1.0 and info["resolved"], info
        reward, info, _ = asyncio.run(_episode(path, [call("submit")]))
        assert reward == 0.0 and info["grade_reason"], info
    finally:
        remove_images(prepare_image(image).tag, image)


def test_bubblewrap_cannot_start_from_an_image_and_says_to_use_docker(tmp_path):
    from sandbox.sessions.backends.bubblewrap import BubblewrapSessionBackend

    with pytest.raises(SandboxUnavailable, match="use backend=docker"):
        asyncio.run(BubblewrapSessionBackend().prepare("swebench/sweb.eval.x86_64.any:latest"))
    shipped = load_instances(SHIPPED)[0]
    path = tmp_path / "only_image.jsonl"
    path.write_text(json.dumps(swe_bench_row(shipped, "nobody__nothing-1")) + "\n")
    env = SWEEnv(source=f"swe:{path}", backend="bubblewrap")
    with pytest.raises(ValueError, match="needs backend=docker"):
        asyncio.run(env.areset(options={"task": task_row(_inst(path))}))


@pytest.mark.slow
def test_a_repository_with_dependencies_runs_on_its_own_image_built_once(tmp_path):
    """minicalc made to import `six` (declared in requirements.txt): its gold patch resolves on
    the dependency image, not on the bare sandbox base; the second build is a cache hit."""
    _need_docker()
    repo = tmp_path / "minicalc"
    shutil.copytree(FIXTURES / "repos" / "minicalc", repo)
    nonce = secrets.token_hex(4)  # a fresh content hash: the first build is a cold one
    (repo / "requirements.txt").write_text(f"six  # test {nonce}\n")
    init = repo / "minicalc" / "__init__.py"
    init.write_text("import six  # noqa: F401\n" + init.read_text())
    path = with_repo("swe_smith", repo, tmp_path)
    first = build_deps_image(repo)
    try:
        copy = shutil.copytree(repo, tmp_path / "same-deps")  # same files, another tree
        second = build_deps_image(copy)
        assert not first.cached and second.cached and second.tag == first.tag
        inst = load_instances(path)[:1]
        results = asyncio.run(_validate(inst, "local"))
        assert results[0].ok, results[0].problems
        bare = asyncio.run(_validate(inst, "off"))  # the sandbox base: `import six` fails
        assert not bare[0].ok and "F2P" in "; ".join(bare[0].problems)
    finally:
        remove_images(first.tag)


async def _validate(instances: list[Instance], images: str):
    try:
        return await validate(instances, backend="docker", images=images)
    finally:
        await sandbox.close_sessions()
