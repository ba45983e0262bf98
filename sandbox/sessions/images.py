"""Published per-instance images (SWE-bench style: a repository at /testbed) made ready for sessions.

    prepared = prepare_image("swebench/sweb.eval.x86_64.django_1776_django-11099:latest")
    prepared.tag, prepared.agent_python, prepared.test_python, prepared.testbed_mb

A docker session started with `image=` runs in such an image with the default image's isolation
(read-only root, no network, no capabilities, an unprivileged uid, capped tmpfs): the repository
cannot stay where the image has it, on a read-only root and owned by root, so the session mounts a
size-capped tmpfs at /testbed owned by its uid and the agent copies the image's tree into it
before it reports ready. Docker here has no tmpfs copy-up, and a mount hides what is under it, so
the tree must also be elsewhere in the image: `prepare_image` makes, once per source image (cached
by its image id, under a lock), a derived image `gspo-session-image:<hash>` holding a readable copy
at /.gspo-testbed and labels saying which python runs the agent (3.9+, standard library) and which
one has the repository's dependencies (a conda env named testbed, a venv, else the first python
on the image's PATH that imports pytest). Nothing of the source image is changed.

The source image must exist on the engine or be pullable (a failed `docker pull` is retried
after PULL_RETRY_S).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import subprocess
import time
from dataclasses import dataclass

from sandbox.errors import ImageBuildError, SandboxUnavailable
from sandbox.isolation.image import _build_lock

__all__ = ["PreparedImage", "image_id", "pull_or_reason", "prepare_image"]

log = logging.getLogger(__name__)
PREPARED_REPO = "gspo-session-image"
PREP_REVISION = 1  # bump when PROBE changes
TESTBED = "/testbed"
SEED_DIR = "/.gspo-testbed"
_LABEL = "gspo.session."
# Runs as root in a throwaway container of the source image (no network, no capabilities but
# those the copy needs): picks the pythons, checks bash, copies the repository to SEED_DIR
# readable by any uid; prints key=value lines.
PROBE = r"""
agent="" test="" pyt=""
for p in /usr/bin/python3 /usr/local/bin/python3 $(command -v python3 2>/dev/null) \
         /opt/miniconda3/bin/python3 /opt/conda/bin/python3; do
  if [ -z "$agent" ] && [ -x "$p" ] && "$p" -S -c 'import sys, ctypes, hashlib, resource, selectors, tarfile; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then agent=$p; fi
done
for p in /opt/miniconda3/envs/testbed/bin/python /opt/conda/envs/testbed/bin/python \
         /testbed/.venv/bin/python /opt/venv/bin/python /opt/*/envs/*/bin/python \
         $(command -v python 2>/dev/null) $(command -v python3 2>/dev/null) $agent; do
  [ -x "$p" ] || continue
  if "$p" -c 'import pytest' 2>/dev/null; then test=$p; pyt=1; break; fi
  [ -n "$test" ] || test=$p
done
echo "agent_python=$agent"
echo "test_python=$test"
echo "test_has_pytest=$pyt"
[ -x /bin/bash ] && echo "bash=1"
if [ -d /testbed ]; then
  cp -a /testbed /.gspo-testbed && chmod -R a+rX /.gspo-testbed && echo "testbed_kb=$(du -sk /.gspo-testbed | cut -f1)"
fi
"""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    source: str  # the image as named (e.g. swebench/sweb.eval.x86_64...:latest)
    tag: str  # the derived image sessions start from
    agent_python: str  # absolute path of a python >= 3.9 for the session agent
    test_python: str  # the python with the repository's dependencies
    test_has_pytest: bool  # whether test_python imports pytest (else the grader brings its own)
    testbed_mb: int  # size of the repository tree (the /testbed tmpfs holds it + disk_mb)

    @property
    def bin_dir(self) -> str:
        """Put first on the session's PATH: `python`, `pytest` are the repository's env's."""
        return self.test_python.rsplit("/", 1)[0]


_prepared: dict[tuple[str | None, str], PreparedImage] = {}
_pull_failed: dict[tuple[str | None, str], tuple[float, str]] = {}  # (when, why)
PULL_RETRY_S = 600.0  # a failed pull is not tried again for this long (a registry outage ends)


def _docker(host: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    cli = ["docker", "-H", host] if host else ["docker"]
    return subprocess.run([*cli, *args], capture_output=True, text=True)


def image_id(image: str, host: str | None = None) -> str | None:
    """The image's id on the engine, or None when it is not there (engine errors raise)."""
    probe = _docker(host, "image", "inspect", "--format", "{{.Id}}", image)
    if probe.returncode == 0:
        return probe.stdout.strip()
    if "no such image" in probe.stderr.lower():
        return None
    raise SandboxUnavailable(
        f"docker engine at {host or 'the default socket'} did not answer: {probe.stderr[:300]}"
    )


def pull_or_reason(image: str, host: str | None = None, *, pull: bool = True) -> str | None:
    """None when `image` is on the engine (pulling it first if allowed and missing); else why
    not. A failed pull is not retried for PULL_RETRY_S."""
    if image_id(image, host) is not None:
        return None
    if not pull:
        return "not on the docker engine and pulling is off"
    key = (host, image)
    failed = _pull_failed.get(key)
    if failed is not None and time.monotonic() - failed[0] < PULL_RETRY_S:
        return failed[1]
    start = time.monotonic()
    run = _docker(host, "pull", "--quiet", image)
    if run.returncode != 0:
        _pull_failed[key] = (time.monotonic(), f"docker pull failed: {run.stderr.strip()[:300]}")
        return _pull_failed[key][1]
    log.info("pulled %s in %.1fs", image, time.monotonic() - start)
    return None


def prepare_image(image: str, host: str | None = None, *, pull: bool = True) -> PreparedImage:
    """The session-ready derived image of `image` (built once per source image id)."""
    key = (host, image)
    if key in _prepared:
        return _prepared[key]
    reason = pull_or_reason(image, host, pull=pull)
    if reason is not None:
        raise SandboxUnavailable(
            f"docker image {image!r} is not available ({reason}); `docker pull` it (or build "
            "it) on the engine first"
        )
    source_id = image_id(image, host) or ""
    digest = hashlib.sha256(f"{source_id}|{PREP_REVISION}".encode()).hexdigest()[:16]
    tag = f"{PREPARED_REPO}:{digest}"
    with _build_lock():
        if image_id(tag, host) is None:
            _build(image, tag, host)
    _prepared[key] = prepared = _read_labels(image, tag, host)
    return prepared


def _build(image: str, tag: str, host: str | None) -> None:
    start = time.monotonic()
    name = f"gspo-prep-{secrets.token_hex(4)}"
    run = _docker(  # root for the copy, but no network and only the copy's capabilities
        host, "run", "--name", name, "--user", "0", "--network", "none", "--cap-drop", "ALL",
        "--cap-add", "CHOWN", "--cap-add", "DAC_OVERRIDE", "--cap-add", "FOWNER",
        "--security-opt", "no-new-privileges", "--pids-limit", "256",
        "--entrypoint", "/bin/sh", image, "-c", PROBE,
    )  # fmt: skip
    try:
        if run.returncode != 0:
            raise ImageBuildError(
                f"cannot prepare docker image {image!r} for sessions (it needs /bin/sh): "
                f"{(run.stderr or run.stdout).strip()[-500:]}"
            )
        found = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
        _refuse_unusable(image, found)
        changes = []
        for field in ("agent_python", "test_python", "test_has_pytest", "testbed_kb"):
            changes += ["--change", f"LABEL {_LABEL}{field}={found.get(field, '')}"]
        commit = _docker(host, "commit", *changes, name, tag)
        if commit.returncode != 0:
            raise ImageBuildError(f"docker commit of {image!r} failed: {commit.stderr[:300]}")
    finally:
        _docker(host, "rm", "-f", name)
    log.info("prepared %s for sessions as %s in %.1fs", image, tag, time.monotonic() - start)


def _refuse_unusable(image: str, found: dict[str, str]) -> None:
    if not found.get("agent_python"):
        raise ImageBuildError(
            f"docker image {image!r} has no python3 >= 3.9 (with ctypes, resource, tarfile) for "
            "the session agent; looked at /usr/bin/python3, /usr/local/bin/python3, the PATH's "
            "python3 and /opt/{miniconda3,conda}/bin/python3: install one in the image"
        )
    if not found.get("bash"):
        raise ImageBuildError(f"docker image {image!r} has no /bin/bash, which sessions run")
    if "testbed_kb" not in found:
        raise ImageBuildError(
            f"docker image {image!r} has no {TESTBED}: published SWE images keep the "
            "repository there"
        )


def _read_labels(image: str, tag: str, host: str | None) -> PreparedImage:
    probe = _docker(host, "image", "inspect", "--format", "{{json .Config.Labels}}", tag)
    labels = json.loads(probe.stdout or "null") or {}
    got = {k[len(_LABEL) :]: v for k, v in labels.items() if k.startswith(_LABEL)}
    return PreparedImage(
        source=image,
        tag=tag,
        agent_python=got.get("agent_python", ""),
        test_python=got.get("test_python") or got.get("agent_python", ""),
        test_has_pytest=got.get("test_has_pytest") == "1",
        testbed_mb=int(got.get("testbed_kb") or 0) // 1024 + 1,
    )
