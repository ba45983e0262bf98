"""`python -m envs.swe validate PATH`: gold-validate an instance file (see envs/swe/validate.py).
`python -m envs.swe prebuild PATH`: make the images its instances run in (envs/swe/images.py).
`python -m envs.swe agents PATH`: play scripted agents through the tools (envs/swe/agents.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from envs.swe.agents import AGENTS, attack_plan, play, summary
from envs.swe.instances import load_instances
from envs.swe.validate import table, validate

PER_REPO = "at most N instances of each repository (a seeded sample; 0: all)"


def per_repo(instances: list, n: int) -> list:
    """A seeded sample of at most n instances per repository, in file order."""
    import random

    by_repo: dict[str, list] = {}
    for inst in instances:
        by_repo.setdefault(inst.repo, []).append(inst)
    keep = set()
    for rows in by_repo.values():
        keep |= {i.instance_id for i in random.Random(0).sample(rows, min(n, len(rows)))}
    return [i for i in instances if i.instance_id in keep]


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
    check.add_argument("--per-repo", type=int, default=0, help=PER_REPO)
    agents = sub.add_parser(
        "agents",
        help="oracle/null/stub agents through the tools (exit 1 "
        "unless only the oracle resolves, on every instance)",
    )
    agents.add_argument("path", help="a JSONL file of instances")
    agents.add_argument("--backend", default="auto", choices=["auto", "docker", "bubblewrap"])
    agents.add_argument("--images", default="auto", choices=["auto", "local", "off"])
    agents.add_argument("--only", nargs="*", default=None, help="instance ids to play")
    agents.add_argument("--concurrency", type=int, default=2)
    agents.add_argument("--per-repo", type=int, default=0, help=PER_REPO)
    agents.add_argument(
        "--agents",
        default=",".join(AGENTS),
        type=_agent_list,
        help=f"comma-separated, of {', '.join(AGENTS)}",
    )
    agents.add_argument(
        "--attacks",
        action="store_true",
        help="the red-team suite (envs/swe/attacks.py): the oracle on every instance and "
        "--per-instance attacks on each, by a seeded rotation",
    )
    agents.add_argument("--per-instance", type=int, default=2, help="attacks per instance")
    agents.add_argument("--seed", type=int, default=0, help="seed of the attack rotation")
    agents.add_argument("--full", action="store_true", help="every attack on every instance")
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
    if args.per_repo > 0:
        instances = per_repo(instances, args.per_repo)
    if args.command == "agents":
        return asyncio.run(_agents(instances, args))
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


def _agent_list(text: str) -> list[str]:
    import difflib

    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names or [""]:
        if name not in AGENTS:
            close = difflib.get_close_matches(name, AGENTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise argparse.ArgumentTypeError(
                f"unknown agent {name!r}{hint}; choose from {', '.join(AGENTS)}"
            )
    return names


async def _agents(instances, args) -> int:
    import sandbox

    plan = None
    names = list(args.agents)
    if args.attacks:
        per = 10**6 if args.full else args.per_instance
        plan = attack_plan(instances, per_instance=per, seed=args.seed)
        names = list(dict.fromkeys(a for _, a in plan))
        print(
            f"attacks: {len(plan)} episodes, seed {args.seed}, per instance {args.per_instance}"
            f"{' (full)' if args.full else ''}",
            flush=True,
        )
    try:
        plays = await play(
            instances,
            names,
            path=args.path,
            backend=args.backend,
            concurrency=args.concurrency,
            images=args.images,
            plan=plan,
        )
    finally:
        await sandbox.close_sessions()
    text, ok = summary(plays, names)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
