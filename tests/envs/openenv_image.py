"""Builds an OpenEnv server image offline, for the `env.kwargs.image` tests.

No registry is reachable here, so the image is the project's sandbox image (Debian's python3, a
local image) plus the host's installed `openenv-core` and the distributions it needs (copied from
site-packages by their RECORD files, as `pip install openenv-core` would have laid them out, with
their bytecode: the server's root is read-only, so it could not cache its own),
laid out as OpenEnv's Dockerfile template does: the env's code at /app/env/server/app.py (the
sum env of tests/envs/openenv_echo_server.py), a `uvicorn` on the PATH, and the template's CMD.
The tag is a content hash of all of that, so a second run finds the image and builds nothing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from packaging.requirements import Requirement

SERVER = Path(__file__).with_name("openenv_echo_server.py")
ROOTS = ("openenv-core", "uvicorn", "fastmcp")
REPO = "gspo-openenv-sum"
SITE = "/opt/openenv-site"
UVICORN = "#!/usr/bin/python3\nimport sys\nfrom uvicorn.main import main\nsys.exit(main())\n"
DOCKERFILE = f"""FROM {{base}}
COPY site {SITE}
COPY env /app/env
COPY uvicorn /usr/local/bin/uvicorn
ENV PYTHONPATH=/app/env:{SITE}
WORKDIR /app
CMD ["sh", "-c", "cd /app/env && uvicorn server.app:app --host 0.0.0.0 --port 8000"]
"""


def distributions() -> list[md.Distribution]:
    """`ROOTS` and everything they require (with the extras asked for), as installed here."""
    seen: dict[str, md.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(name, "") for name in ROOTS]
    while todo:
        name, extra = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if (key, extra) in done:
            continue
        done.add((key, extra))
        dist = seen.setdefault(key, md.distribution(name))
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return [seen[k] for k in sorted(seen)]


def site_files(dists: list[md.Distribution]) -> list[tuple[Path, str]]:
    """(host file, path under site-packages) for every installed file of `dists`."""
    out = []
    for dist in dists:
        for rel in dist.files or []:
            if rel.parts[0] == "..":
                continue  # console scripts: their shebang is the host's python
            src = Path(dist.locate_file(rel))
            if src.is_file():
                out.append((src, str(rel)))
    return out


def content_tag(base: str, files: list[tuple[Path, str]]) -> str:
    h = hashlib.sha256()
    for text in (base, DOCKERFILE, UVICORN, SERVER.read_text()):
        h.update(text.encode() + b"\0")
    for src, rel in files:  # installed files: their path and size name them well enough
        h.update(f"{rel}\0{src.stat().st_size}\0".encode())
    return f"{REPO}:{h.hexdigest()[:16]}"


def ensure_image(base: str) -> tuple[str, float]:
    """The image's tag, and the seconds spent building it (0.0 when it was already there)."""
    files = site_files(distributions())
    tag = content_tag(base, files)
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag, 0.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gspo-openenv-build-") as ctx:
        root = Path(ctx)
        for src, rel in files:
            dst = root / "site" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)  # the same filesystem: no copy
            except OSError:
                shutil.copy2(src, dst)
        (root / "env" / "server").mkdir(parents=True)
        (root / "env" / "server" / "__init__.py").write_text("")
        shutil.copy(SERVER, root / "env" / "server" / "app.py")
        (root / "uvicorn").write_text(UVICORN)
        (root / "uvicorn").chmod(0o755)
        (root / "Dockerfile").write_text(DOCKERFILE.format(base=base))
        out = subprocess.run(
            ["docker", "build", "-q", "-t", tag, str(root)],
            capture_output=True,
            text=True,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )
    if out.returncode != 0:
        raise RuntimeError(f"docker build of {tag} failed: {out.stderr[-3000:]}")
    return tag, time.monotonic() - started
