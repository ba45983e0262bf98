"""Where an SWE instance runs: its own published image, or a per-repository image with its deps.

    place = placement(inst, backend="docker")      # Placement(repo_dir, options, prepared)
    tag = deps_image(tree)                          # per-repository image, or None (no deps)

`images="auto"` (the env's default): an instance whose image (image_name / docker_image / the
SWE-bench harness's name) is on the docker engine, or can be pulled (rows without repo_path;
`prebuild` pulls for the others), runs in it with the
repository at /testbed and the tests run with the image's python that has the repository's
dependencies (sandbox/sessions/images.py picks it). Otherwise a row with repo_path runs from its
local repository at /workspace/repo on an image built from the sandbox base with the
repository's declared dependencies installed (requirements*.txt, pyproject.toml [project]
dependencies and test extras, setup.cfg install_requires), built once per content hash of those
files and the base image's id, offline after the first build; a repository that declares none
runs on the sandbox base itself. `images="local"` never pulls; `images="off"` always uses
repo_path on the sandbox base (the version before images). Images need backend docker (or auto
with docker working); bubblewrap runs repo_path rows on its own root and refuses image-only rows.
"""

from __future__ import annotations

import configparser
import hashlib
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.swe.instances import Instance

__all__ = [
    "IMAGE_MODES",
    "DepsBuild",
    "Placement",
    "build_deps_image",
    "dependency_specs",
    "deps_image",
    "placement",
    "prebuild",
]

log = logging.getLogger(__name__)
IMAGE_MODES = ("auto", "local", "off")
DEPS_REPO = "gspo-swe-deps"
DEPS_REVISION = 1
TEST_EXTRAS = ("test", "tests", "testing", "dev")


@dataclass(frozen=True)
class Placement:
    repo_dir: str  # where the episode's repository is: /testbed (image) or /workspace/repo
    options: dict[str, Any] = field(default_factory=dict)  # extra docker session options
    prepared: Any = None  # sandbox.sessions.images.PreparedImage in image mode

    @property
    def in_image(self) -> bool:
        return self.prepared is not None


_docker_ok: dict[str, str | None] = {}


def docker_problem() -> str | None:
    """None when a docker engine answers here; else why not (checked once per process)."""
    if "local" not in _docker_ok:
        if shutil.which("docker") is None:
            _docker_ok["local"] = "the docker CLI is not installed"
        else:
            run = subprocess.run(
                ["docker", "version", "--format", "{{.Server.Version}}"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            _docker_ok["local"] = None if run.returncode == 0 else run.stderr.strip()[:200]
    return _docker_ok["local"]


def repo_dir(inst: Instance, *, backend: str, images: str = "auto") -> str:
    """Where `inst`'s repository will be, decided cheaply (no pull, no preparation: at most a
    `docker image inspect`) and as `placement` decides: /testbed for a row with only an image,
    and for a row with repo_path too when the engine already has its image."""
    if not inst.image or images == "off" or backend not in ("auto", "docker"):
        return "/workspace/repo" if inst.repo_path else "/testbed"
    if not inst.repo_path:
        return "/testbed"
    from sandbox.sessions.images import image_id

    if docker_problem() is not None or image_id(inst.image) is None:
        return "/workspace/repo"
    return "/testbed"


def placement(inst: Instance, *, backend: str, images: str = "auto") -> Placement:
    """Where `inst` runs; ValueError naming the fix when it cannot run anywhere here. A row with
    repo_path uses its image only when the engine has it (no pull: `prebuild` pulls)."""
    from sandbox.sessions.images import prepare_image, pull_or_reason

    if images not in IMAGE_MODES:
        raise ValueError(f"images={images!r}: choose one of {IMAGE_MODES}")
    dockerish = backend in ("auto", "docker")
    problem = docker_problem() if dockerish else f"backend={backend!r}"
    if inst.image and images != "off" and problem is None:
        pull = images == "auto" and not inst.repo_path
        reason = pull_or_reason(inst.image, pull=pull)
        if reason is None:
            return Placement("/testbed", {"image": inst.image}, prepare_image(inst.image))
        if not inst.repo_path:
            raise ValueError(
                f"instance {inst.instance_id!r} names only the image {inst.image!r}, which is "
                f"not usable here ({reason}): `docker pull` it (images='auto' pulls), or give "
                "the row a repo_path"
            )
    if not inst.repo_path:
        why = "images='off'" if images == "off" else f"docker is not usable ({problem})"
        raise ValueError(
            f"instance {inst.instance_id!r} names only the image {inst.image!r} and has no "
            f"repo_path; its sessions must start from that image, which needs backend=docker "
            f"with a working engine and images='auto' or 'local' (here: {why})"
        )
    return Placement("/workspace/repo")


def repo_options(tree: Path, *, backend: str, images: str) -> dict[str, Any]:
    """Session options of a repo_path episode: the per-repository deps image when there is one."""
    specs = dependency_specs(tree)[1]
    if not specs or images == "off":
        return {}
    problem = docker_problem() if backend in ("auto", "docker") else f"backend={backend!r}"
    if problem is not None:
        _warn_once(
            f"{tree.name}: its dependencies ({', '.join(specs[:4])}) are not installed: "
            f"per-repository images need docker ({problem}); tests run on the sandbox base"
        )
        return {}
    return {"image_tag": deps_image(tree)}


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def dependency_specs(tree: Path) -> tuple[dict[str, bytes], list[str]]:
    """The repository's dependency files (relative path -> bytes) and the requirement specs
    they declare (the project itself and local paths left out)."""
    files: dict[str, bytes] = {}
    specs: list[str] = []
    candidates = sorted(
        {*tree.glob("*requirements*.txt"), *tree.glob("requirements/*.txt")}
        | {p for p in (tree / "pyproject.toml", tree / "setup.cfg") if p.is_file()}
    )
    for path in candidates:
        rel = path.relative_to(tree).as_posix()
        data = path.read_bytes()
        files[rel] = data
        text = data.decode(errors="replace")
        if path.name == "pyproject.toml":
            specs += _pyproject_specs(text, rel)
        elif path.name == "setup.cfg":
            specs += _setup_cfg_specs(text)
        else:
            specs += _requirement_lines(text)
    return files, sorted(dict.fromkeys(s for s in specs if s))


def _requirement_lines(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-", ".", "/")) or "file:" in line:
            continue  # options, nested files, editable or local installs
        out.append(line)
    return out


def _pyproject_specs(text: str, rel: str) -> list[str]:
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # 3.10: pip's vendored copy of the same parser
        from pip._vendor import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{rel} is not valid TOML: {exc}") from exc
    project = data.get("project", {})
    out = list(project.get("dependencies", []))
    extras = project.get("optional-dependencies", {})
    groups = data.get("dependency-groups", {})
    for name in TEST_EXTRAS:
        out += list(extras.get(name, []))
        out += [g for g in groups.get(name, []) if isinstance(g, str)]
    return [str(s) for s in out]


def _setup_cfg_specs(text: str) -> list[str]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    out = _requirement_lines(parser.get("options", "install_requires", fallback=""))
    for name in TEST_EXTRAS:
        out += _requirement_lines(parser.get("options.extras_require", name, fallback=""))
    return out


@dataclass(frozen=True)
class DepsBuild:
    tag: str
    seconds: float  # how long ensuring it took (the build, or the cache lookup)
    cached: bool  # the image was already there


_built: dict[str, str] = {}


def deps_image(tree: Path) -> str:
    """The tag of `tree`'s dependency image (build_deps_image, remembered for the process)."""
    key = repr(sorted(dependency_specs(tree)[0].items()))
    if key not in _built:
        _built[key] = build_deps_image(tree).tag
    return _built[key]


def build_deps_image(tree: Path) -> DepsBuild:
    """The docker image of the sandbox base with `tree`'s declared dependencies installed, built
    once per content hash (dependency files + base image id); logs how long it took."""
    from sandbox.isolation.image import _build_lock, ensure_image
    from sandbox.sessions.images import image_id

    start = time.monotonic()
    files, specs = dependency_specs(tree)
    base = ensure_image()
    blob = repr((DEPS_REVISION, image_id(base), sorted(files.items()), specs)).encode()
    tag = f"{DEPS_REPO}:{hashlib.sha256(blob).hexdigest()[:16]}"
    with _build_lock():
        cached = image_id(tag) is not None
        if not cached:
            _build_deps_image(base, tag, specs)
    seconds = time.monotonic() - start
    log.info(
        "dependency image %s of %s (%d requirements): %s in %.1fs",
        tag, tree.name, len(specs), "cached" if cached else "built", seconds,
    )  # fmt: skip
    return DepsBuild(tag, seconds, cached)


def _build_deps_image(base: str, tag: str, specs: list[str]) -> None:
    """pip on the host (PyPI or its configured mirror) into a directory for the image's python,
    then `docker build` FROM the base with that directory as its site-packages (no network in
    the build, none in the sandbox)."""
    probe = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/usr/bin/python3", base,
         "-c", "import site, sys; print('%d.%d' % sys.version_info[:2]); "
         "print(site.getsitepackages()[0])"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        raise RuntimeError(f"cannot run python in {base}: {probe.stderr.strip()[:300]}")
    version, site_dir = probe.stdout.split()
    with tempfile.TemporaryDirectory(prefix="swe-deps-") as ctx:
        cross = []
        if version != "{}.{}".format(*sys.version_info[:2]):  # wheels for the image's python
            cross = ["--python-version", version, "--only-binary=:all:"]
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
             "--disable-pip-version-check", "--target", f"{ctx}/site", *cross, *specs],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if pip.returncode != 0:
            raise RuntimeError(
                f"installing the repository's dependencies for {tag} failed (pip needs PyPI "
                f"or a mirror the first time): {pip.stderr.strip()[-800:]}"
            )
        Path(ctx, "site").mkdir(exist_ok=True)
        Path(ctx, "Dockerfile").write_text(f"FROM {base}\nCOPY site {site_dir}\n")
        build = subprocess.run(
            ["docker", "build", "--quiet", "--force-rm", "--network", "none", "-t", tag, ctx],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if build.returncode != 0:
            raise RuntimeError(f"docker build of {tag} failed: {build.stderr.strip()[-800:]}")


def prebuild(instances: list[Instance], *, images: str = "auto") -> list[tuple[str, str, float]]:
    """Make every image the instances need (pull + prepare, or the dependency image), so that no
    episode waits for a build; (instance_id, what, seconds) per instance."""
    from sandbox.errors import SandboxError

    out = []
    for inst in instances:
        start = time.monotonic()
        try:
            if inst.image and images == "auto":  # rows with repo_path too: episodes never pull
                from sandbox.sessions.images import pull_or_reason

                pull_or_reason(inst.image)
            place = placement(inst, backend="docker", images=images)
            if place.in_image:
                what = f"image {inst.image} -> {place.prepared.tag}"
            else:
                with tempfile.TemporaryDirectory(prefix="swe-prebuild-") as tmp:
                    from envs.swe.repo import materialize

                    tree = materialize(inst, Path(tmp) / "repo")
                    tag = repo_options(tree, backend="docker", images=images).get("image_tag")
                what = f"repo_path on {tag}" if tag else "repo_path on the sandbox base (no deps)"
        except (ValueError, RuntimeError, SandboxError) as exc:
            what = f"FAILED: {exc}"
        out.append((inst.instance_id, what, time.monotonic() - start))
    return out
