"""The sandbox root filesystem and Docker image, built offline.

One recipe (RECIPE) defines what is inside: Debian bookworm minbase, Python 3 with its full
standard library (python3-minimal alone lacks ctypes, decimal, ... which the runner and programs
need) and g++ for C++17. `ensure_rootfs()` runs debootstrap into a cache directory named by the
recipe's content hash (the bubblewrap and namespaces backends use that directory read-only as their `/`), and
`ensure_image()` imports the same tree into Docker as `gspo-sandbox:<hash>`. Both are no-ops when
the cache is already there. Users with a registry can `docker build` sandbox/isolation/Dockerfile instead.

Needs root (debootstrap) and network access to a Debian mirror, only the first time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sandbox.errors import ImageBuildError, SandboxUnavailable

log = logging.getLogger(__name__)

# Bump "revision" when the post-processing below changes; the hash covers the whole dict.
RECIPE: dict[str, object] = {
    "suite": "bookworm",
    "variant": "minbase",
    "packages": ["python3-minimal", "python3", "g++", "libc6-dev"],
    "revision": 2,
}
# Files that must not carry the build host's identity (debootstrap copies the host's hostname
# and resolver), and the names every sandbox resolves without a network.
IDENTITY_FILES = {
    "etc/hostname": "sandbox\n",
    "etc/resolv.conf": "",
    "etc/hosts": (
        "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    ),
}
IMAGE_REPO = "gspo-sandbox"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def recipe_hash() -> str:
    blob = json.dumps(RECIPE, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def image_tag() -> str:
    return f"{IMAGE_REPO}:{recipe_hash()}"


def cache_dir() -> Path:
    env = os.environ.get("GSPO_SANDBOX_CACHE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/gspo-sandbox")
    return Path.home() / ".cache" / "gspo-sandbox"


def rootfs_path() -> Path:
    return cache_dir() / f"rootfs-{recipe_hash()}"


def rootfs_ready() -> bool:
    return (rootfs_path() / ".gspo-complete").exists()


def detect_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line format), else the default."""
    if os.environ.get("GSPO_SANDBOX_MIRROR"):
        return os.environ["GSPO_SANDBOX_MIRROR"]
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in files:
        if not (path.name.endswith(".list") or path.name.endswith(".sources")):
            continue
        try:
            text = path.read_text()
        except OSError:
            continue
        for url in re.findall(r"(?:URIs:|deb)\s+(https?://\S+)", text):
            if url.rstrip("/").endswith("/debian"):
                return url
    return DEFAULT_MIRROR


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """Serialize builds across processes (parallel test runs may all want the image)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_rootfs() -> Path:
    """Build the cached root filesystem if missing; return its path."""
    if rootfs_ready():
        return rootfs_path()
    with _build_lock():
        return _ensure_rootfs_locked()


def _ensure_rootfs_locked() -> Path:
    target = rootfs_path()
    if rootfs_ready():
        return target
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise SandboxUnavailable(
            f"sandbox rootfs {target} is missing and cannot be built here: building needs root and "
            "debootstrap (apt-get install debootstrap; then run `python -m sandbox doctor` or "
            "`bash .ci/setup_sandbox.sh` as root)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-build-", dir=target.parent))
    try:
        _debootstrap(work)
        _post_process(work)
        (work / ".gspo-complete").write_text(json.dumps(RECIPE, sort_keys=True))
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    log.info("built sandbox rootfs %s", target)
    return target


def _debootstrap(dest: Path) -> None:
    mirror = detect_mirror()
    cmd = [
        "debootstrap",
        f"--variant={RECIPE['variant']}",
        "--include=" + ",".join(RECIPE["packages"]),  # type: ignore[arg-type]
        str(RECIPE["suite"]),
        str(dest),
        mirror,
    ]
    log.info("building sandbox rootfs: %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise ImageBuildError(f"debootstrap failed (mirror {mirror}):\n{tail}")


def _post_process(root: Path) -> None:
    # Nothing in the sandbox needs apt, docs or caches; smaller trees import faster.
    for rel in (
        "var/cache/apt",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
        "usr/share/info",
    ):
        shutil.rmtree(root / rel, ignore_errors=True)
    for rel, text in IDENTITY_FILES.items():
        path = root / rel
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text(text)
        path.chmod(0o644)
    root.chmod(0o755)  # mkdtemp made it 0700; unprivileged sandbox users must traverse it
    (root / "tmp").chmod(0o1777)
    for rel in ("var/tmp",):
        (root / rel).mkdir(parents=True, exist_ok=True)


def docker_image_present(tag: str, host: str | None = None) -> bool:
    """Whether `tag` exists; raises SandboxUnavailable when the engine itself does not answer
    (so that a restarting daemon is never mistaken for a missing image)."""
    probe = _docker(host, "image", "inspect", "--format", "{{.Id}}", tag)
    if probe.returncode == 0:
        return True
    if "no such image" in probe.stderr.lower():
        return False
    raise SandboxUnavailable(
        f"docker engine at {host or 'the default socket'} did not answer: "
        f"{probe.stderr.strip()[:300]}"
    )


def _docker(host: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    cli = ["docker", "-H", host] if host else ["docker"]
    return subprocess.run([*cli, *args], capture_output=True, text=True)


def ensure_image(tag: str | None = None, *, host: str | None = None) -> str:
    """Make sure the Docker image exists on `host` (importing the cached rootfs); return its tag."""
    tag = tag or image_tag()
    if docker_image_present(tag, host):
        return tag
    if tag != image_tag():
        raise SandboxUnavailable(
            f"docker image {tag!r} is not present on "
            f"{host or 'the local engine'}; build or pull it first"
        )
    root = ensure_rootfs()
    with _build_lock():
        if docker_image_present(tag, host):  # another process imported it meanwhile
            return tag
        _import(root, tag, host)
    return tag


def _import(root: Path, tag: str, host: str | None) -> None:
    log.info("importing %s into docker as %s", root, tag)
    cli = ["docker", "-H", host] if host else ["docker"]
    changes = [
        "--change",
        "USER 65534:65534",
        "--change",
        "WORKDIR /tmp",
        "--change",
        'CMD ["sleep", "infinity"]',
    ]
    tar = subprocess.Popen(
        ["tar", "-C", str(root), "--exclude=./.gspo-complete", "-c", "."], stdout=subprocess.PIPE
    )
    assert tar.stdout is not None
    code, err = -1, "docker import did not run"
    try:
        imp = subprocess.run(
            [*cli, "import", *changes, "-", tag], stdin=tar.stdout, capture_output=True, text=True
        )
        code, err = imp.returncode, imp.stderr
    finally:
        tar.stdout.close()  # else tar blocks forever on a pipe nobody reads if import died
        if code != 0 and tar.poll() is None:
            tar.kill()
        tar.wait()
    if code != 0 or tar.returncode != 0:
        raise ImageBuildError(f"docker import failed: {err.strip()}")
