"""`python -m gspo_agents.serve`: a LocalEngine behind the SGLang-compatible HTTP subset.

    python -m gspo_agents.serve --model tiny --port 30000
    python -m gspo_agents.serve --model-path /path/to/hf_dir --port 30000

Point the trainer at it with `engine=sglang engine.urls=[http://127.0.0.1:30000]`. With
`--port 0` the OS picks a free port. Once listening, the server prints one line to stdout,
`READY http://HOST:PORT`, which scripts and tests wait for. See rollout/server.py for the API.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gspo_agents.models import ModelConfig, load_tokenizer, resolve_model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gspo_agents.serve", description=__doc__.split("\n")[0]
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-path", help="a local Hugging Face checkpoint directory")
    src.add_argument("--model", choices=["tiny", "tiny-moe"], help="build/use a tiny local model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 = any free port")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--weight-version",
        default="default",
        help='the launch weight version: "default" as SGLang 0.5.23 boots (server_args), or an '
        "integer",
    )
    p.add_argument(
        "--enable-deterministic-inference",
        action="store_true",
        help="reported in /server_info, as SGLang does (this server honours seeds either way)",
    )
    p.add_argument(
        "--enable-return-routed-experts",
        action="store_true",
        help="let requests ask for their MoE routes (return_routed_experts), as SGLang's flag",
    )
    p.add_argument(
        "--health-check-timeout",
        type=float,
        default=20.0,
        help="s a /health call waits while generation is paused before 503 (SGLang: 20)",
    )
    p.add_argument(
        "--fail-weight-loads",
        type=int,
        default=0,
        help="fault injection: the next N weight loads fail (HTTP 400), as a bad checkpoint would",
    )
    p.add_argument(
        "--die-after-buckets",
        type=int,
        default=0,
        help="fault injection: the process exits (as if killed) once it received N "
        "/update_weights_from_distributed buckets, before answering the Nth",
    )
    p.add_argument(
        "--num-threads", type=int, default=1, help="torch threads of the engine (0: torch default)"
    )
    p.add_argument("--enable-lora", action="store_true", help="LoRA adapter endpoints (SGLang's)")
    p.add_argument("--max-lora-rank", type=int, default=None, help="with --enable-lora")
    p.add_argument("--lora-target-modules", nargs="+", default=[], help="with --enable-lora")
    p.add_argument("--max-loaded-loras", type=int, default=None, help="with --enable-lora")
    p.add_argument("--log-level", default="warning")
    p.add_argument("--debug", action="store_true", help="full tracebacks for errors")
    return p.parse_args(argv)


def resolve_path(args: argparse.Namespace) -> str:
    if args.model_path:
        return resolve_model(ModelConfig(name="hf", path=args.model_path, dtype=args.dtype))
    return resolve_model(ModelConfig(name=args.model, dtype=args.dtype))


def boot_version(raw: str) -> int:
    """The engine's integer version of a launch `--weight-version`: "default" is BOOT_VERSION,
    which the server writes back as "default"."""
    from gspo_agents.rollout.server import BOOT_VERSION

    if raw == "default":
        return BOOT_VERSION
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f'--weight-version={raw!r}: give "default" or an integer') from None


async def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from gspo_agents.rollout.local_engine import LocalEngine
    from gspo_agents.rollout.server import build_app
    from gspo_agents.rollout.server_lora import LoraSettings

    lora = LoraSettings(
        args.enable_lora, args.max_lora_rank, tuple(args.lora_target_modules), args.max_loaded_loras
    )
    lora.check_launch()
    sock = bind_port(args.host, args.port)  # before the model loads: a busy port fails at once
    path = resolve_path(args)
    engine = LocalEngine(
        path,
        dtype=args.dtype,
        max_batch_size=args.max_batch_size,
        seed=args.seed,
        weight_version=boot_version(args.weight_version),
        num_threads=args.num_threads or None,
        return_routed_experts=args.enable_return_routed_experts,
    )
    try:
        tokenizer = load_tokenizer(path)
    except (OSError, ValueError):
        tokenizer = None  # responses carry ids and log-probs; text stays empty
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        build_app(
            engine,
            tokenizer,
            deterministic=args.enable_deterministic_inference,
            health_check_timeout_s=args.health_check_timeout,
            fail_loads=args.fail_weight_loads,
            lora=lora,
            die_after_buckets=args.die_after_buckets,
        ),
        log_level=args.log_level,
        timeout_keep_alive=5,  # SGLang's (uvicorn's) default; clients expire idle ones sooner
        access_log=False,
    )
    server = uvicorn.Server(config)
    ready = asyncio.create_task(_announce(server, host, port))
    try:
        await server.serve(sockets=[sock])
    finally:
        ready.cancel()
        await engine.close()


class PortInUse(OSError):
    """The port cannot be bound; the message names it and the `--port` fix."""


def bind_port(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUse(
            f"cannot listen on {host}:{port} ({exc.strerror}): another server holds it? "
            "choose another with --port N (--port 0: any free port)"
        ) from exc
    return sock


async def _announce(server, host: str, port: int) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    print(f"READY http://{host}:{port}", flush=True)


@dataclass(slots=True)
class ServerProcess:
    """A `python -m gspo_agents.serve` subprocess (tests, benchmarks, CPU users' scripts)."""

    url: str
    process: subprocess.Popen
    log_path: str

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        with contextlib.suppress(OSError):  # its log was for while it ran
            os.unlink(self.log_path)

    def kill(self) -> None:
        """SIGKILL, as a crashed worker dies (fault-injection tests)."""
        self.process.kill()
        self.process.wait()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def launch(
    *,
    model: str | None = "tiny",
    model_path: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    extra_args: Sequence[str] = (),
    ready_timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start a server subprocess and wait for its READY line (port 0: the OS picks one)."""
    source = ["--model-path", model_path] if model_path else ["--model", str(model)]
    cmd = [sys.executable, "-m", "gspo_agents.serve", *source, "--host", host, "--port", str(port)]
    log_fd, log_path = tempfile.mkstemp(prefix="gspo-serve-", suffix=".log")
    process = subprocess.Popen(
        [*cmd, *extra_args],
        stdout=subprocess.PIPE,
        stderr=log_fd,
        text=True,
        env={**os.environ, **(env or {})},
    )
    os.close(log_fd)
    server = ServerProcess("", process, log_path)
    deadline = time.monotonic() + ready_timeout_s
    assert process.stdout is not None  # stdout=PIPE above
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline and process.poll() is None:
            if sel.select(timeout=0.2):
                line = process.stdout.readline()
                if line.startswith("READY "):
                    server.url = line.split()[1]
                    return server
    code = process.poll()
    tail = server.log_tail()
    server.stop()
    raise RuntimeError(
        f"`{' '.join(cmd)}` did not become ready within {ready_timeout_s} s "
        f"(exit code {code}); its log ends with:\n{tail}"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        asyncio.run(serve(args))
    except PortInUse as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down gracefully; no traceback
        sys.exit(130)


if __name__ == "__main__":
    main()
