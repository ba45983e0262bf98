"""SWE images: build times (cold and cached) and session start on a per-instance image. One table.

    python benchmarks/swe_images.py [--starts 5] [--requirements six] [--big]

Rows:
  deps image cold      envs.swe.images.build_deps_image on a repository declaring --requirements
                       (a fresh content hash: pip on the host + `docker build` FROM the sandbox base)
  deps image cached    the same files again (a docker image inspect)
  published image      a SWE-bench-style image built locally (tests/envs/swe_image_util.py: the
                       shipped inflection repository at /testbed, a python env with pytest)
  prepare cold/cached  sandbox.sessions.images.prepare_image on it: the probe, the copy of
                       /testbed, `docker commit` (cold); labels read back (cached, new process
                       state)
  session start ...    `pool.session()` entered with no warm sandbox until an `exec true`
                       answered, median (and max) of --starts, on: the default sandbox image,
                       the deps image, the per-instance image (its /testbed copied into the
                       session's tmpfs before the agent is ready) and, with --big, a
                       per-instance image whose /testbed is a large tree (the host's Python
                       standard library sources, about the size of a Django checkout)
Images made here are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from gspo_agents.tracking import BenchProgress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs.swe.images import build_deps_image  # noqa: E402
from envs.swe.instances import load_instances  # noqa: E402
from envs.swe.repo import materialize  # noqa: E402
from sandbox import SessionPool  # noqa: E402
from sandbox.sessions import images as session_images  # noqa: E402
from sandbox.sessions.api import SessionLimits  # noqa: E402
from tests.envs.swe_image_util import published_image, remove_images  # noqa: E402


def timed(fn, *args):
    start = time.monotonic()
    out = fn(*args)
    return time.monotonic() - start, out


async def starts(n: int, progress: BenchProgress, **options) -> list[float]:
    out = []
    limits = SessionLimits(disk_mb=256, memory_mb=1024)
    async with SessionPool("docker", max_sessions=1, **options) as pool:
        for _ in range(n):
            start = time.monotonic()
            async with pool.session(limits) as ws:
                await ws.exec("true")
                out.append(time.monotonic() - start)
            progress.tick()
    return out


def big_tree(dest: Path) -> Path:
    """The host's Python standard library sources (no bytecode, no site-packages)."""
    src = Path(sysconfig.get_paths()["stdlib"])
    skip = shutil.ignore_patterns("__pycache__", "site-packages", "*.pyc")
    shutil.copytree(src, dest, ignore=skip, symlinks=True)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--requirements", nargs="+", default=["six"])
    parser.add_argument("--big", action="store_true", help="also a /testbed of ~100 MB")
    args = parser.parse_args()
    kinds = 3 + int(args.big)
    progress = BenchProgress("steps", 4 + int(args.big) + kinds * args.starts)
    rows: list[tuple[str, str]] = []
    tags: list[str] = []
    with tempfile.TemporaryDirectory(prefix="swe-bench-img-") as tmp:
        repo = Path(tmp, "repo")
        repo.mkdir()
        nonce = secrets.token_hex(4)
        (repo / "requirements.txt").write_text("\n".join(args.requirements) + f"\n# {nonce}\n")
        cold_s, cold = timed(build_deps_image, repo)
        tags.append(cold.tag)
        rows.append((f"deps image cold ({' '.join(args.requirements)})", f"{cold_s:.1f} s"))
        progress.tick()
        warm_s, warm = timed(build_deps_image, repo)
        assert warm.cached and warm.tag == cold.tag
        rows.append(("deps image cached", f"{warm_s:.2f} s"))
        progress.tick()
        shipped = next(
            i
            for i in load_instances(ROOT / "envs/swe/data/instances.jsonl")
            if i.instance_id.startswith("inflection")
        )
        tree = materialize(shipped, Path(tmp, "testbed"))
        image = f"gspo-bench-published:{nonce}"
        built_s, _ = timed(published_image, tree, image)
        tags.append(image)
        rows.append(("published-style image (docker build)", f"{built_s:.1f} s"))
        prep_s, prepared = timed(session_images.prepare_image, image)
        tags.append(prepared.tag)
        session_images._prepared.clear()
        again_s, _ = timed(session_images.prepare_image, image)
        rows.append(("prepare for sessions cold / cached", f"{prep_s:.1f} s / {again_s:.2f} s"))
        progress.tick()
        big = ""
        if args.big:
            big = f"gspo-bench-published:{nonce}-big"
            big_s, _ = timed(published_image, big_tree(Path(tmp, "big")), big)
            tags.append(big)
            prep_big_s, prep_big = timed(session_images.prepare_image, big)
            tags.append(prep_big.tag)
            rows.append(
                (f"big image ({prep_big.testbed_mb} MB /testbed): build / prepare",
                 f"{big_s:.1f} s / {prep_big_s:.1f} s")
            )  # fmt: skip
            progress.tick()
        kinds_run = [("default sandbox image", {}), ("deps image", {"image_tag": cold.tag})]
        kinds_run.append(
            (f"per-instance image ({prepared.testbed_mb} MB /testbed)", {"image": image})
        )
        if big:
            kinds_run.append(
                (f"per-instance image ({prep_big.testbed_mb} MB /testbed)", {"image": big})
            )
        try:
            for label, options in kinds_run:
                got = asyncio.run(starts(args.starts, progress, **options))
                rows.append(
                    (f"session start: {label}",
                     f"{statistics.median(got):.2f} s median, {max(got):.2f} s max")
                )  # fmt: skip
        finally:
            remove_images(*tags)
        progress.tick()
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  time")
    for what, value in rows:
        print(f"{what:<{width}}  {value}")


if __name__ == "__main__":
    main()
