"""Published per-instance images (SWE-bench style: a repository at /testbed) made ready for sessions.

    prepared = prepare_image("swebench/sweb.eval.x86_64.django_1776_django-11099:latest")
    prepared.tag, prepared.test_python, prepared.testbed_mb

A docker session started with `image=` runs in such an image with the default image's isolation
(read-only root, no network, no capabilities, an unprivileged uid, capped tmpfs): the repository
cannot stay where the image has it, on a read-only root and owned by root, so the session mounts a
size-capped tmpfs at /testbed owned by its uid and the agent copies the image's tree into it
before it reports ready. Docker here has no tmpfs copy-up, and a mount hides what is under it, so
the tree must also be elsewhere in the image: `prepare_image` makes, once per source image (cached
by its image id), a derived image `gspo-session-image:<hash>` holding a readable copy at
/.gspo-testbed and labels saying how big that copy is and which python has the repository's
dependencies (a conda env named testbed, a venv, else the PATH's python; pytest found by its
files). Nothing of the source image is changed.

Nothing the image runs or says is trusted. No program of the image runs to prepare it or to
serve its sessions: the preparation and the session agent run on the sandbox image's own
python, which `interpreter_volume` puts, once per docker host, into a docker volume mounted
read-only at /.gspo-py and started through its own dynamic loader (`--inhibit-cache`, its own
library path, /etc/ld.so.preload masked by /dev/null, `python -I -S`), so neither the image's
libraries nor its environment reach it. The copy, the size of the tree (in tmpfs pages) and the
paths are measured by that program (PREP_SOURCE); the size is capped at MAX_TESTBED_MB. The
preparation container is time-limited (PREP_TIMEOUT_S), runs with memory, pids and capability
limits and carries the owner labels of every sandbox container (DockerBackend.reap_stale removes
it when its owner is gone); no machine-wide lock is held while it runs (one lock per derived
image, so only another preparation of the same image waits).

The source image must exist on the engine or be pullable (a failed `docker pull` is retried
after PULL_RETRY_S).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

from sandbox.errors import ImageBuildError, SandboxUnavailable
from sandbox.isolation import cgroups as cgroups_mod
from sandbox.isolation import image as base_image

__all__ = [
    "PreparedImage",
    "image_id",
    "interpreter_argv",
    "interpreter_mounts",
    "interpreter_volume",
    "pull_or_reason",
    "prepare_image",
]

log = logging.getLogger(__name__)
PREPARED_REPO = "gspo-session-image"
PREP_REVISION = 2  # bump when PREP_SOURCE changes (2: nothing of the image runs)
TESTBED = "/testbed"
SEED_DIR = "/.gspo-testbed"
INTERP_DIR = "/.gspo-py"  # the sandbox image's /usr, read-only, in image sessions
MAX_TESTBED_MB = 4096  # a bigger /testbed is refused (it becomes memory: a tmpfs per session)
PREP_TIMEOUT_S = 600.0  # the preparation container is killed after this long
PREP_MEMORY_MB, PREP_PIDS = 512, 16
_LABEL = "gspo.session."
_FIELDS = ("test_python", "test_has_pytest", "testbed_kb")
_SAFE_PATH = re.compile(r"/[A-Za-z0-9._+/-]{1,250}")
_LOADERS = {"x86_64": "x86_64-linux-gnu/ld-linux-x86-64.so.2", "aarch64": "aarch64-linux-gnu/ld-linux-aarch64.so.1"}  # fmt: skip
# Runs on OUR python (interpreter_argv) in a throwaway container of the source image, as root
# with no capability but DAC_OVERRIDE (to read a tree of any owner): copies /testbed to SEED_DIR
# readable by any uid (regular files, dirs and symlinks; nothing followed, nothing else copied)
# counting its tmpfs footprint, finds the test python by its files, prints one JSON line.
PREP_SOURCE = r"""
import glob, json, os, stat, sys
PAGE, cap = 4096, int(sys.argv[1]) << 20
def has_pytest(py):
    env = os.path.dirname(os.path.dirname(py))
    pats = [env + "/lib/python3*/site-packages/", "/usr/lib/python3/dist-packages/",
            "/usr/local/lib/python3*/site-packages/"]
    return any(glob.glob(p + "pytest/__init__.py") + glob.glob(p + "_pytest") for p in pats)
def executable(p):
    return os.path.isfile(p) and os.access(p, os.X_OK)
cands = ["/opt/miniconda3/envs/testbed/bin/python", "/opt/conda/envs/testbed/bin/python",
         "/testbed/.venv/bin/python", "/opt/venv/bin/python",
         *sorted(glob.glob("/opt/*/envs/*/bin/python")), "/usr/local/bin/python",
         "/usr/local/bin/python3", "/usr/bin/python", "/usr/bin/python3"]
found = [p for p in cands if executable(p)]
with_pytest = [p for p in found if has_pytest(p)]
test = (with_pytest or found or [""])[0]
used = [0]
def charge(n):
    used[0] += PAGE + -(-n // PAGE) * PAGE
    if used[0] > cap:
        print(json.dumps({"error": "/testbed is over %d MiB" % (cap >> 20)}))
        sys.exit(0)
def copy(src, dst):
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        charge(0)
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISDIR(st.st_mode):
        charge(0)
        os.mkdir(dst, 0o755)
        for name in sorted(os.listdir(src)):
            copy(src + "/" + name, dst + "/" + name)
    elif stat.S_ISREG(st.st_mode):
        charge(st.st_size)
        fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if st.st_mode & 0o111 else 0o644)
        try:
            while True:
                chunk = os.read(fin, 1 << 20)
                if not chunk:
                    break
                os.write(fout, chunk)  # (nothing else runs here: the size stat gave holds)
        finally:
            os.close(fin)
            os.close(fout)
out = {"test_python": test, "test_has_pytest": bool(with_pytest),
       "bash": executable("/bin/bash"), "testbed": os.path.isdir("/testbed")}
if out["testbed"] and not os.path.islink("/testbed"):
    copy("/testbed", "/.gspo-testbed")
    out["testbed_kb"] = used[0] // 1024
print(json.dumps(out))
"""


def interpreter_argv() -> list[str]:
    """Our python in an image session: the sandbox image's loader, libraries and python under
    INTERP_DIR, no ld cache, no environment (followed by the python's own arguments)."""
    loader = _LOADERS.get(platform.machine(), _LOADERS["x86_64"])
    libs = f"{INTERP_DIR}/lib/{loader.split('/')[0]}"
    return [f"{INTERP_DIR}/lib/{loader}", "--inhibit-cache", "--library-path", libs,
            f"{INTERP_DIR}/bin/python3"]  # fmt: skip


def interpreter_mounts(volume: str) -> list[str]:
    """docker run flags: our python's volume read-only at INTERP_DIR, ld.so.preload masked."""
    return [
        "--mount", f"type=volume,src={volume},dst={INTERP_DIR},readonly",
        "--mount", "type=bind,src=/dev/null,dst=/etc/ld.so.preload,readonly",
    ]  # fmt: skip


def interpreter_volume(host: str | None = None) -> str:
    """The docker volume holding the sandbox image's /usr on `host` (made once: docker copies
    the image's tree into an empty volume when a container of it is created)."""
    tag = base_image.ensure_image(host=host)
    volume = "gspo-interp-" + hashlib.sha256(tag.encode()).hexdigest()[:16]
    if _docker(host, "volume", "inspect", volume).returncode == 0:
        return volume
    with _lock(f"interp-{volume}"):
        if _docker(host, "volume", "inspect", volume).returncode == 0:
            return volume
        name = f"gspo-interp-fill-{secrets.token_hex(4)}"
        # creating the container makes the volume and copies the image's /usr into it
        fill = _docker(host, "create", "--name", name, *_owner_labels(), "--label",
                       "gspo-sandbox.kind=interpreter", "-v", f"{volume}:/usr", tag, "true")  # fmt: skip
        _docker(host, "rm", "-f", name)
        if fill.returncode:
            _docker(host, "volume", "rm", "-f", volume)
            raise SandboxUnavailable(
                f"cannot make the sandbox's interpreter volume on {host or 'the local engine'}: "
                f"{fill.stderr.strip()[:300]}"
            )
    return volume


def _owner_labels() -> list[str]:
    from sandbox.isolation.backends.docker import LABEL, START_LABEL, owner_id

    start = cgroups_mod.start_ticks(os.getpid())
    return ["--label", f"{LABEL}={owner_id()}", "--label", f"{START_LABEL}={start}"]


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    """A host-wide lock of one preparation (not the machine-wide build lock)."""
    base_image.cache_dir().mkdir(parents=True, exist_ok=True)
    with open(base_image.cache_dir() / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True, slots=True)
class PreparedImage:
    source: str  # the image as named (e.g. swebench/sweb.eval.x86_64...:latest)
    tag: str  # the derived image sessions start from
    volume: str  # the docker volume of our python (interpreter_volume), for the session agent
    test_python: str  # the python with the repository's dependencies
    test_has_pytest: bool  # whether test_python imports pytest (else the grader brings its own)
    testbed_mb: int  # tmpfs footprint of the repository tree, measured by us, <= MAX_TESTBED_MB

    @property
    def bin_dir(self) -> str:
        """Put first on the session's PATH: `python`, `pytest` are the repository's env's."""
        return self.test_python.rsplit("/", 1)[0]


_prepared: dict[tuple[str | None, str], PreparedImage] = {}
_pull_failed: dict[tuple[str | None, str], tuple[float, str]] = {}  # (when, why)
PULL_RETRY_S = 600.0  # a failed pull is not tried again for this long (a registry outage ends)


def _docker(
    host: str | None, *args: str, timeout_s: float | None = None
) -> subprocess.CompletedProcess[str]:
    cli = ["docker", "-H", host] if host else ["docker"]
    return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=timeout_s)


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
    volume = interpreter_volume(host)
    if image_id(tag, host) is None:
        with _lock(f"prep-{digest}"):  # only another preparation of this image waits here
            if image_id(tag, host) is None:
                _build(image, tag, host, volume)
    _prepared[key] = prepared = _read_labels(image, tag, host, volume)
    return prepared


def prep_argv(name: str, image: str, volume: str) -> list[str]:
    """`docker run` of the preparation: our python (PREP_SOURCE) in a container of `image`."""
    return [
        "run", "--name", name, *_owner_labels(), "--label", "gspo-sandbox.kind=prepare",
        "--user", "0", "--network", "none", "--cap-drop", "ALL", "--cap-add", "DAC_OVERRIDE",
        "--security-opt", "no-new-privileges", "--pids-limit", str(PREP_PIDS),
        "--memory", f"{PREP_MEMORY_MB}m", "--memory-swap", f"{PREP_MEMORY_MB}m",
        "--cpus", "1", "--log-driver", "none", *interpreter_mounts(volume),
        "--entrypoint", interpreter_argv()[0], image, *interpreter_argv()[1:], "-I", "-S",
        "-c", PREP_SOURCE, str(MAX_TESTBED_MB),
    ]  # fmt: skip


def _build(image: str, tag: str, host: str | None, volume: str) -> None:
    start = time.monotonic()
    name = f"gspo-prep-{secrets.token_hex(4)}"
    try:
        try:
            run = _docker(host, *prep_argv(name, image, volume), timeout_s=PREP_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise ImageBuildError(
                f"preparing docker image {image!r} for sessions took over {PREP_TIMEOUT_S:.0f}s "
                "(sandbox.sessions.images.PREP_TIMEOUT_S); its /testbed may be too big"
            ) from exc
        found = _parse_found(image, run)
        changes = []
        for field in _FIELDS:
            changes += ["--change", f"LABEL {_LABEL}{field}={found.get(field, '')}"]
        commit = _docker(host, "commit", *changes, name, tag)
        if commit.returncode != 0:
            raise ImageBuildError(f"docker commit of {image!r} failed: {commit.stderr[:300]}")
    finally:
        _remove(host, name)
    log.info("prepared %s for sessions as %s in %.1fs", image, tag, time.monotonic() - start)


def _remove(host: str | None, name: str) -> None:
    """`docker rm -f`, again while the engine may still be creating it (a CLI killed at the
    time limit); what is still left carries the owner labels, so the next start reaps it."""
    for _ in range(5):
        _docker(host, "rm", "-f", name)
        listed = _docker(host, "ps", "-aq", "--filter", f"name=^{name}$")
        if listed.returncode == 0 and not listed.stdout.strip():
            return
        time.sleep(0.5)


def _parse_found(image: str, run: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """PREP_SOURCE's JSON line, checked; the fields as label values."""
    try:
        found = json.loads(run.stdout.strip().splitlines()[-1])
        assert isinstance(found, dict)
    except (IndexError, ValueError, AssertionError):
        raise ImageBuildError(
            f"cannot prepare docker image {image!r} for sessions (exit {run.returncode}): "
            f"{(run.stderr or run.stdout).strip()[-500:]}"
        ) from None
    if found.get("error"):
        raise ImageBuildError(
            f"docker image {image!r}: {found['error']} (MAX_TESTBED_MB), too big for sessions"
        )
    if not found.get("bash"):
        raise ImageBuildError(f"docker image {image!r} has no /bin/bash, which sessions run")
    if not found.get("testbed") or not isinstance(found.get("testbed_kb"), int):
        raise ImageBuildError(
            f"docker image {image!r} has no {TESTBED} directory: published SWE images keep "
            "the repository there"
        )
    test = found.get("test_python")
    if not isinstance(test, str) or not _SAFE_PATH.fullmatch(test):
        raise ImageBuildError(
            f"docker image {image!r} has no python for the repository's tests (looked for a "
            "testbed conda env, a venv, /usr/local/bin and /usr/bin): install one in the image"
        )
    kb = found["testbed_kb"]
    return {"test_python": test, "test_has_pytest": "1" if found.get("test_has_pytest") else "",
            "testbed_kb": str(kb)}  # fmt: skip


def _read_labels(image: str, tag: str, host: str | None, volume: str) -> PreparedImage:
    probe = _docker(host, "image", "inspect", "--format", "{{json .Config.Labels}}", tag)
    labels = json.loads(probe.stdout or "null") or {}
    got = {k[len(_LABEL) :]: v for k, v in labels.items() if k.startswith(_LABEL)}
    test = got.get("test_python", "")
    kb = got.get("testbed_kb", "")
    if not _SAFE_PATH.fullmatch(test) or not kb.isdigit():
        raise ImageBuildError(f"prepared image {tag} of {image!r} has bad labels {got}: remove it")
    return PreparedImage(
        source=image,
        tag=tag,
        volume=volume,
        test_python=test,
        test_has_pytest=got.get("test_has_pytest") == "1",
        testbed_mb=min(int(kb) // 1024 + 1, MAX_TESTBED_MB),
    )
