"""Helpers of the SWE image tests and benchmarks/swe_images.py: a local "published-style" image.

`published_image(tree, tag)` `docker build`s, offline, from the sandbox base image, an image laid
out as SWE-bench's are: the repository at /testbed (owned by root, as there) and a python env at
/opt/miniconda3/envs/testbed (a venv over the base's python3, with pytest and its dependencies
in its site-packages) that the base's own /usr/bin/python3 does not see. So a session must find
the env's python to run the tests, and the agent runs on the base's python, as on a real one.
`swe_bench_row(inst)` writes an instance as SWE-bench publishes it (no image field: the harness
name is derived from instance_id) for the repository state baked into the image.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from envs.swe.instances import Instance
from envs.swe.repo import pytest_bundle
from sandbox.isolation.image import ensure_image

ENV = "/opt/miniconda3/envs/testbed"


def published_image(tree: Path, tag: str) -> str:
    base = ensure_image()
    version = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/usr/bin/python3", base,
         "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    short = ".".join(version.split(".")[:2])
    with tempfile.TemporaryDirectory(prefix="swe-img-") as ctx:
        shutil.copytree(tree, Path(ctx, "testbed"))
        env = Path(ctx, "env")
        site = env / "lib" / f"python{short}" / "site-packages"
        shutil.copytree(pytest_bundle(), site)
        (env / "bin").mkdir()
        for name in ("python", "python3"):
            (env / "bin" / name).symlink_to("/usr/bin/python3")
        (env / "pyvenv.cfg").write_text(
            f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {version}\n"
        )
        subprocess.run(["chmod", "-R", "a+rX", ctx], check=True)  # as a registry's would be
        Path(ctx, "Dockerfile").write_text(
            f"FROM {base}\nUSER root\nCOPY testbed /testbed\nCOPY env {ENV}\nWORKDIR /testbed\n"
        )
        subprocess.run(
            ["docker", "build", "--quiet", "--force-rm", "--network", "none", "-t", tag, ctx],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    return tag


def swe_bench_row(inst: Instance, instance_id: str) -> dict[str, Any]:
    """`inst` as a SWE-bench row (JSON-string id lists, no repo_path, no image field)."""
    return {
        "instance_id": instance_id,
        "repo": inst.repo,
        "base_commit": "0" * 40,
        "patch": inst.gold_patch,
        "test_patch": inst.test_patch,
        "problem_statement": inst.problem_statement,
        "version": "0.0",
        "FAIL_TO_PASS": json.dumps(list(inst.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(inst.pass_to_pass)),
    }


def remove_images(*tags: str) -> None:
    subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True, check=False)
