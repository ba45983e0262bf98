"""Nothing a per-instance image runs or says is trusted (docker sessions with `image=`, a real
engine): hostile published-style images, built here from the sandbox base, whose /bin/sh lies
about the tree's size and names a fake python as the agent, or never returns. Shown: the
container's memory limit is the session's plus the tree's size as we measure it; the session's
replies come from our agent, not from the image's python; preparing an image that would hang its
own shell finishes, even while another process holds the machine-wide build lock; the
preparation is time-limited, owner-labelled, capped, and leaves no container behind."""

from __future__ import annotations

import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from session_util import published_test_image, started_pool
from timing import patience

from sandbox import SessionLimits
from sandbox.errors import ImageBuildError
from sandbox.isolation.image import _build_lock
from sandbox.sessions import images

LIAR_SH = """#!/bin/bash
cp -a /testbed /.gspo-testbed; chmod -R a+rX /.gspo-testbed
echo agent_python=/opt/fake/python3; echo test_python=/usr/bin/python3; echo bash=1
echo testbed_kb=3000000
"""
FAKE_AGENT = """#!/bin/bash
[[ "$*" == *"import sys, ctypes"* ]] && exit 0
read -r line; echo '{"ready": true}'
while read -r line; do
  echo '{"exit_code": 0, "stdout": "FORGED\\n", "stderr": "", "stdout_cut": 0, "stderr_cut": 0, "wall_s": 0.1, "cpu_s": 0.0, "reason": ""}'
done
"""
HANG_SH = "#!/bin/bash\nexec sleep 100000\n"


def hostile_image(sh: str) -> str:
    """The published test image with /bin/sh replaced by `sh` and a fake python at /opt/fake."""
    base = published_test_image()
    tag = f"{base}-hostile-{abs(hash(sh)) % 10**8}"
    with tempfile.TemporaryDirectory() as ctx:
        Path(ctx, "sh").write_text(sh)
        Path(ctx, "py").write_text(FAKE_AGENT)
        Path(ctx, "Dockerfile").write_text(
            f"FROM {base}\nCOPY py /opt/fake/python3\nCOPY sh /gspo-sh\n"
            "RUN chmod 755 /opt/fake/python3 /gspo-sh && ln -sf /gspo-sh /bin/sh\n"
        )
        subprocess.run(
            ["docker", "build", "--quiet", "--force-rm", "--network", "none", "-t", tag, ctx],
            capture_output=True, text=True, check=True, timeout=600,
        )  # fmt: skip
    return tag


@pytest.fixture(scope="module")
def hostile() -> Iterator[dict[str, str]]:
    made: dict[str, str] = {}
    yield made
    tags = [p.tag for p in images._prepared.values() if p.source in made.values()]
    subprocess.run(["docker", "rmi", "-f", *tags, *made.values()], capture_output=True)


def prepare_containers() -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=gspo-sandbox.kind=prepare"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return out.stdout.split()


async def test_an_images_word_sets_no_limit_and_its_python_no_answer(hostile) -> None:
    pool = await started_pool("docker", max_sessions=1)  # fail (CI) / skip without docker
    try:
        hostile["liar"] = image = hostile_image(LIAR_SH)
        limits = SessionLimits(memory_mb=256)
        async with pool.session(limits, image=image) as ws:
            r = await ws.exec("echo real; ls /testbed/pkg")
            assert r.stdout == "real\nmod.py\n", r  # our agent answered, on the image's tree
            memory = subprocess.run(
                ["docker", "inspect", "-f", "{{.HostConfig.Memory}}", ws.name],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
        assert int(memory) <= (limits.tree_memory_mb() + 16) << 20, memory
    finally:
        await pool.aclose()


async def test_preparing_an_image_never_runs_its_shell_nor_waits_on_the_build_lock(
    hostile,
) -> None:
    pool = await started_pool("docker", max_sessions=1)
    await pool.aclose()
    hostile["hang"] = image = hostile_image(HANG_SH)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(images.prepare_image(image)))
    with _build_lock():  # another process building: a preparation does not wait for it
        worker.start()
        worker.join(patience(180))
    assert outcome and isinstance(outcome[0], images.PreparedImage), "prepare_image hung"
    assert outcome[0].test_python == "/opt/miniconda3/envs/testbed/bin/python"
    assert prepare_containers() == []


def test_the_preparation_is_time_limited_and_leaves_nothing(monkeypatch, hostile) -> None:
    images.interpreter_volume()  # made once, before the clock starts
    source = published_test_image()
    images._prepared.clear()
    subprocess.run(
        ["docker", "rmi", "-f", *[t for t in _prepared_tags(source)]], capture_output=True
    )
    monkeypatch.setattr(images, "PREP_TIMEOUT_S", 0.01)
    with pytest.raises(ImageBuildError, match="PREP_TIMEOUT_S"):
        images.prepare_image(source)
    assert prepare_containers() == []


def _prepared_tags(source: str) -> list[str]:
    sid = images.image_id(source) or ""
    import hashlib

    digest = hashlib.sha256(f"{sid}|{images.PREP_REVISION}".encode()).hexdigest()[:16]
    return [f"{images.PREPARED_REPO}:{digest}"]


def test_the_preparation_container_is_labelled_capped_and_runs_our_python() -> None:
    from sandbox.isolation.backends.docker import LABEL, START_LABEL, owner_id

    argv = images.prep_argv("gspo-prep-x", "some/image", "gspo-interp-x")
    flags = dict(zip(argv, argv[1:]))
    labels = [v for k, v in zip(argv, argv[1:]) if k == "--label"]
    assert f"{LABEL}={owner_id()}" in labels and any(v.startswith(START_LABEL) for v in labels)
    assert flags["--memory"] == f"{images.PREP_MEMORY_MB}m" and flags["--pids-limit"]
    assert flags["--cap-drop"] == "ALL" and flags["--network"] == "none"
    assert flags["--entrypoint"].startswith(images.INTERP_DIR)  # our loader, not /bin/sh
    assert "/bin/sh" not in argv
