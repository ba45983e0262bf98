"""Every learner rank drives its share of a step's groups (`rollout.drivers=all_ranks`).

Group g of a step goes to rank g % world (rollout/shards.py). Each rank has its own driver: a
RolloutManager (or a RolloutProcess, `rollout.driver_process=true`) with its own engine client,
envs and sandbox, against the same engine workers. Rank 0 runs the training loop as before and
holds a `RankDrivers`, which offers the manager's driving API: each call is broadcast to the
other ranks on the learner's command channel (learner_group.follow hands it to their
`FollowerRollouts`), every rank does its part, and a batch comes back to rank 0 with
`gather_object` over a gloo group and is merged (`merge_shards`: groups in task order, counters
summed, means re-weighted). Weight updates are made once, by rank 0; the other ranks are told
when one begins (their engine clients then accept answers at any version) and what version it
ended at (later requests sample under it).

A failure on another rank (a bug: trajectory errors are statuses and travel in the batch) comes
back in the gather and is raised on rank 0, naming the rank, so no rank waits for ever.
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from gspo_agents.rollout.shards import merge_shards, shard_tasks

ROLLOUT = "rollout"  # the command name on the learner's broadcast channel


@dataclass(frozen=True, slots=True)
class ShareFailed:
    rank: int
    text: str  # the traceback on that rank


class RankDriveError(RuntimeError):
    """Another rank's driving raised; the message carries its traceback."""


def rollout_group():
    """The gloo group the batches travel on (objects; the learner's group may be NCCL). Every
    rank calls it at the same point of the run (a collective)."""
    return dist.new_group(backend="gloo")


def _send(method: str, *args: Any) -> None:
    dist.broadcast_object_list([(ROLLOUT, (method, args))], src=0)


class RankDrivers:
    """Rank 0's handle: its own driver's share, the others' shares by broadcast and gather."""

    def __init__(self, local, group, world: int) -> None:
        self.local = local
        self.group = group
        self.world = world
        self.chat = local.chat

    @property
    def engine(self):
        return self.local.engine

    @property
    def weight_version(self) -> int:
        return self.local.weight_version

    async def collect(self, tasks: list[dict]):
        _send("collect", tasks)
        return await self._gathered(self.local.collect(shard_tasks(tasks, 0, self.world)))

    def start_prefetch(self, tasks: list[dict]) -> None:
        _send("start_prefetch", tasks)
        self.local.start_prefetch(shard_tasks(tasks, 0, self.world))

    async def next_batch(self):
        _send("next_batch")
        return await self._gathered(self.local.next_batch())

    async def update_weights(self, path: str, version: int) -> None:
        _send("follow_update_begin")
        await asyncio.to_thread(dist.barrier, group=self.group)  # every client knows first
        try:
            await self.local.update_weights(path, version)
        finally:  # a failed update leaves the version as it was: the others follow that
            _send("follow_weights", self.local.weight_version)

    async def sync_start_weights(self, path: str, version: int) -> None:
        await self.local.sync_start_weights(path, version)
        _send("follow_weights", self.local.weight_version)

    async def aclose(self) -> None:  # the other ranks close theirs on the learner's STOP
        await self.local.aclose()

    async def _gathered(self, own):
        try:
            mine = await own
        except Exception:
            mine = None
            raise
        finally:  # the others wait in the gather: enter it whatever happened here
            shares: list[Any] = [None] * self.world
            await asyncio.to_thread(dist.gather_object, mine, shares, dst=0, group=self.group)
        for share in shares[1:]:
            if isinstance(share, ShareFailed):
                raise RankDriveError(f"rank {share.rank}'s rollouts failed:\n{share.text}")
        return merge_shards(shares)


class FollowerRollouts:
    """A follower rank's driver, run on an event loop of its own thread so that the rank's
    main thread keeps following the learner's commands. Consumes rank 0's rollout commands;
    produces this rank's share of each batch, sent to rank 0 in the gather."""

    def __init__(self, build, close, rank: int, world: int, group) -> None:
        """`build()` -> (driver, engine or None), run on this object's loop; `close(engine)`: a
        coroutine that closes the engine and whatever else the driver used, after the driver."""
        self.rank, self.world, self.group = rank, world, group
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._close = close
        self.local, self._engine = self._run(self._async(build))

    def handle(self, method: str, args: tuple) -> None:
        if method in ("collect", "start_prefetch"):
            args = (shard_tasks(args[0], self.rank, self.world),)
        if method in ("collect", "next_batch"):
            self._share(getattr(self.local, method)(*args))
        elif method == "start_prefetch":
            self._run(self._async(lambda: self.local.start_prefetch(*args)))
        elif method == "follow_update_begin":
            self._run(self._async(self.local.follow_update_begin))
            dist.barrier(group=self.group)
        elif method == "follow_weights":
            self._run(self.local.follow_weights(*args))
        else:
            raise ValueError(f"unknown rollout command {method!r}")

    def close(self) -> None:
        try:
            self._run(self.local.aclose())
            self._run(self._close(self._engine))
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    def _share(self, coro) -> None:
        try:
            share = self._run(coro)
        except Exception:  # noqa: BLE001 - rank 0 raises it, naming this rank
            share = ShareFailed(self.rank, traceback.format_exc())
        dist.gather_object(share, None, dst=0, group=self.group)

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @staticmethod
    async def _async(fn):
        return fn()
