"""A rollout worker process: one driving process's RolloutManager, engine client, envs and
sandbox in a spawned child, so the learner's Python never shares a GIL with the driving of
episodes (`rollout.driver_process=true`).

The parent holds a `RolloutProcess`, which offers the manager's own driving API
(`collect`, `start_prefetch`, `next_batch`, `update_weights`, `follow_weights`,
`sync_start_weights`, `weight_version`, `aclose`); each call is one message over a pipe and one
answer back (a RolloutResult is pickled: token ids, log-probs, rewards). The child builds its
pieces from the run config with the same builders as train.py (components.py), so it drives
exactly as an in-process manager would: with `rollout.seed` set the same tokens and rewards.
With `engine=local` the LocalEngine lives in the child too (it loads the new weights there).

Not a cluster manager: one child per driving rank, started with multiprocessing's spawn (no
forked torch or event-loop state), ended by `aclose()` or by the parent's death (the pipe closes).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import sys
import traceback
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gspo_agents.rollout.chat import ChatFormat

_START_TIMEOUT_S = 600.0  # the child imports torch and loads a LocalEngine's weights


class RolloutProcessError(RuntimeError):
    """The rollout worker process failed or died; the message carries its traceback."""


class RolloutProcess:
    """The parent's handle on a rollout worker process: the manager's API, one call at a time."""

    def __init__(self, cfg: DictConfig, model_dir: str, seed: int, tokenizer: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        spec = {"cfg": OmegaConf.to_container(cfg, resolve=True), "model_dir": model_dir}
        self._proc = ctx.Process(
            target=_child_main, args=(child, spec, seed), name="gspo-rollout", daemon=True
        )
        self._proc.start()
        child.close()
        self.chat = ChatFormat(tokenizer)  # the parent's view: samples decode with it
        self._lock = asyncio.Lock()
        self._version = self._answer(self._recv(_START_TIMEOUT_S))  # the child's ready message
        self.engine = None  # the engine lives in the child

    @property
    def weight_version(self) -> int:
        return self._version

    async def collect(self, tasks: list[dict]):
        return await self._call("collect", tasks)

    def start_prefetch(self, tasks: list[dict]) -> None:
        # answered at once (the child only starts a task); a full prefetch queue raises here
        self._answer(self._send_recv("start_prefetch", list(tasks)))

    async def next_batch(self):
        return await self._call("next_batch")

    async def update_weights(self, path: str, version: int) -> None:
        await self._call("update_weights", path, version)

    async def follow_weights(self, version: int) -> None:
        await self._call("follow_weights", version)

    def follow_update_begin(self) -> None:
        self._answer(self._send_recv("follow_update_begin"))

    async def sync_start_weights(self, path: str, version: int) -> None:
        await self._call("sync_start_weights", path, version)

    async def aclose(self) -> None:
        if not self._proc.is_alive():
            return
        try:
            await self._call("close")
        except (RolloutProcessError, OSError, EOFError):
            pass
        finally:
            self._conn.close()
            await asyncio.to_thread(self._proc.join, 30)
            if self._proc.is_alive():
                self._proc.kill()

    async def _call(self, name: str, *args: Any) -> Any:
        async with self._lock:  # one request in flight: answers come back in order
            self._conn.send((name, args))
            return self._answer(await asyncio.to_thread(self._recv, None))

    def _send_recv(self, name: str, *args: Any) -> Any:
        self._conn.send((name, args))
        return self._recv(None)

    def _recv(self, timeout_s: float | None) -> Any:
        while not self._conn.poll(1.0 if timeout_s is None else min(timeout_s, 1.0)):
            if not self._proc.is_alive():
                raise RolloutProcessError(
                    f"the rollout worker process died (exit code {self._proc.exitcode})"
                )
            if timeout_s is not None:
                timeout_s -= 1.0
                if timeout_s <= 0:
                    raise RolloutProcessError("the rollout worker process did not start in time")
        return self._conn.recv()

    def _answer(self, message: Any) -> Any:
        kind, value = message
        if kind == "failed":
            raise RolloutProcessError(f"in the rollout worker process:\n{value}")
        if kind == "version":
            self._version = value[0]
            return value[1]
        return value


# -- the child ----------------------------------------------------------------------------------
def _child_main(conn, spec: dict, seed: int) -> None:
    # Ctrl-C reaches the terminal's whole process group: the parent decides when to stop (after
    # its step, StopSignals) and then closes this process, so the child ignores it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(_serve(conn, OmegaConf.create(spec["cfg"]), spec["model_dir"], seed))
    except (EOFError, OSError, KeyboardInterrupt):  # the parent went away
        sys.exit(0)


async def _serve(conn, cfg: DictConfig, model_dir: str, seed: int) -> None:
    """Consumes the parent's calls one at a time; produces one answer per call. Waits on the pipe
    (a reader thread) and on the manager; ends on `close` or when the pipe closes."""
    from gspo_agents.components import (
        build_engine,
        build_env_factory,
        build_sandbox,
        freeze_startup_objects,
    )
    from gspo_agents.models import load_tokenizer
    from gspo_agents.rollout.manager import RolloutConfig, RolloutManager

    try:
        tokenizer = load_tokenizer(model_dir)
        sandbox = build_sandbox(cfg, cfg.env.name)
        engine = build_engine(cfg, model_dir, seed)
        env_factory = build_env_factory(cfg, sandbox, getattr(tokenizer, "chat_template", None))
        rollout_cfg = RolloutConfig(**OmegaConf.to_container(cfg.rollout, resolve=True))
        manager = RolloutManager(engine, env_factory, tokenizer, rollout_cfg)
    except Exception:  # noqa: BLE001 - handed to the parent, which raises it
        conn.send(("failed", traceback.format_exc()))
        return
    freeze_startup_objects()
    conn.send(("ok", manager.weight_version))
    try:
        while True:
            name, args = await asyncio.to_thread(conn.recv)
            if name == "close":
                conn.send(("ok", None))
                return
            try:
                value = await _dispatch(manager, name, args)
            except Exception:  # noqa: BLE001 - the parent raises it
                conn.send(("failed", traceback.format_exc()))
                continue
            conn.send(("version", (manager.weight_version, value)))
    finally:
        await manager.aclose()
        await engine.close()
        if sandbox is not None:
            await sandbox.aclose()
        if "sandbox.sessions" in sys.modules:
            await sys.modules["sandbox.sessions"].close_sessions()


async def _dispatch(manager, name: str, args: tuple) -> Any:
    if name in ("start_prefetch", "follow_update_begin"):
        return getattr(manager, name)(*args)
    if name in ("collect", "next_batch", "update_weights", "follow_weights", "sync_start_weights"):
        return await getattr(manager, name)(*args)
    raise ValueError(f"unknown rollout worker call {name!r}")
