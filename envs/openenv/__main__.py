"""`python -m envs.openenv serve ENV_ID --port P`: serve a registered env in OpenEnv's protocol."""

from __future__ import annotations

import argparse
import json
import sys

from envs.errors import UnknownEnv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.openenv")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve ENV_ID (e.g. gspo/Codeforces-v0) over OpenEnv /ws")
    serve.add_argument("env_id", help="a registered env id or short name (arithmetic, codeforces)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument(
        "--kwargs", default="{}", help="the env's kwargs as JSON, e.g. '{\"max_turns\": 2}'"
    )
    serve.add_argument(
        "--sandbox",
        default="auto",
        choices=("auto", "docker", "bubblewrap", "namespaces"),
        help="sandbox backend for envs that run code (auto: the strongest available)",
    )
    serve.add_argument("--max-sessions", type=int, default=16, help="concurrent /ws sessions")
    args = parser.parse_args(argv)
    try:
        env_kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as exc:
        parser.error(f"--kwargs is not JSON ({exc}); e.g. --kwargs '{{\"max_turns\": 2}}'")
    if not isinstance(env_kwargs, dict):
        parser.error("--kwargs must be a JSON object")

    import envs

    try:
        envs.resolve_id(args.env_id)  # fail fast, before importing the server stack
    except UnknownEnv as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from envs.openenv.serve import build_app
    from sandbox import SandboxUnavailable

    try:
        app = build_app(
            args.env_id,
            env_kwargs=env_kwargs,
            sandbox_backend=args.sandbox,
            max_sessions=args.max_sessions,
        )
    except SandboxUnavailable as exc:
        print(f"error: {args.env_id} runs code and no sandbox is available: {exc}", file=sys.stderr)
        return 3
    import uvicorn

    backend = app.state.sandbox_backend
    judged = f" (sandbox backend: {backend})" if backend else ""
    url = f"ws://{args.host}:{args.port}/ws"
    print(f"serving {args.env_id} in OpenEnv's protocol on {url}{judged}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
