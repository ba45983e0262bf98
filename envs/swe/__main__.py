"""`python -m envs.swe validate PATH`: gold-validate an instance file (see envs/swe/validate.py).
`python -m envs.swe prebuild PATH`: make the images its instances run in (envs/swe/images.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from envs.swe.instances import load_instances
from envs.swe.validate import table, validate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.swe")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("validate", help="gold-validate SWE instances (exit 1 if any broken)")
    check.add_argument("path", help="a JSONL file of instances")
    check.add_argument("--backend", default="auto", choices=["auto", "docker", "bubblewrap"])
    check.add_argument(
        "--images",
        default="auto",
        choices=["auto", "local", "off"],
        help="auto: the instance's image when local or pullable; local: never pull; off: repo_path",
    )
    check.add_argument("--only", nargs="*", default=None, help="instance ids to validate")
    check.add_argument("--concurrency", type=int, default=2)
    build = sub.add_parser("prebuild", help="pull/prepare or build every image the file needs")
    build.add_argument("path", help="a JSONL file of instances")
    build.add_argument("--images", default="auto", choices=["auto", "local"])
    args = parser.parse_args(argv)
    instances = load_instances(args.path)
    if args.command == "prebuild":
        return _prebuild(instances, args.images)
    if args.only:
        unknown = sorted(set(args.only) - {i.instance_id for i in instances})
        if unknown:
            parser.error(f"--only: no instance {unknown} in {args.path}")
        instances = [i for i in instances if i.instance_id in set(args.only)]
    results = asyncio.run(_run(instances, args.backend, args.concurrency, args.images))
    print(table(results))
    return 0 if all(r.ok for r in results) else 1


def _prebuild(instances, images: str) -> int:
    import logging

    from envs.swe.images import prebuild

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = prebuild(instances, images=images)
    width = max(len(r[0]) for r in rows)
    for iid, what, seconds in rows:
        print(f"{iid:<{width}}  {seconds:7.1f}s  {what}")
    return 1 if any(what.startswith("FAILED") for _, what, _ in rows) else 0


async def _run(instances, backend, concurrency, images):
    import sandbox

    try:
        return await validate(instances, backend=backend, concurrency=concurrency, images=images)
    finally:
        await sandbox.close_sessions()


if __name__ == "__main__":
    sys.exit(main())
