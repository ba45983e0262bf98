"""Weight updates over a torch.distributed group to SGLang workers (the `nccl` update mode).

One update = one weight-update session per worker (SGLang 0.5.23 refuses tensor updates
outside one): POST /begin_weight_update to every worker, then for each bucket of at most
`bucket_bytes` one POST /update_weights_from_distributed per worker while rank 0 (this process)
broadcasts that bucket's tensors, then POST /end_weight_update to every worker, on every exit
path. Only the last bucket names the new weight_version and asks for a cache flush, so a worker
that fails half-way still reports the old version.

Errors: a worker that refuses the session fails the update before anything is sent. A worker
that answers failure while the broadcast waits for it has not taken its part, so the send
would block until the group's timeout: the update fails at once with that worker's own message
and the group is dropped (the next update forms a new one). A worker that took the broadcast
but failed to load is that worker's failure: the caller takes it out of rotation. A worker whose call
fails and that no longer answers at all died: BrokenGroup names it, and GroupUpdates sends the
whole update again to the others over a new group of the workers that answer (the old one
destroyed on both sides), raising only when none is left.

GroupUpdates is the part of SGLangEngine that forms the group and runs these updates (pausing
around them); the group itself is weight_group.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from gspo_agents.rollout.engine import (
    EngineError,
    EngineRequestError,
    EngineUnavailable,
    PauseMode,
)
from gspo_agents.rollout.sglang_http import ControlClient
from gspo_agents.rollout.sglang_wire import (
    BEGIN_UPDATE,
    END_UPDATE,
    distributed_update_body,
    flush_allowed,
    init_group_body,
)
from gspo_agents.rollout.sglang_workers import Worker, WorkerPool
from gspo_agents.rollout.weight_group import (
    bucket_by_bytes,
    destroy_group,
    init_weights_group,
    start_broadcast,
)

log = logging.getLogger(__name__)


class BrokenGroup(EngineError):
    """The broadcast could not complete: the weight group is unusable. `dead`: the workers
    that no longer answer at all (killed or crashed mid-update)."""

    def __init__(self, message: str, dead: list[str] | None = None) -> None:
        super().__init__(message)
        self.dead = dead or []


class SessionUpdate:
    """One bucketed update to `urls` over `group` (see module docstring)."""

    def __init__(
        self, http: ControlClient, urls: list[str], group: Any, group_name: str, update_s: float
    ) -> None:
        self._http = http
        self._urls = urls
        self._group = group
        self._group_name = group_name
        self._update_s = update_s

    async def run(self, buckets: list[list], version: int, flush: bool) -> dict[str, str]:
        """Send every bucket inside one session per worker; returns {url: error} of the workers
        that took the broadcast but failed to load it. Raises if every worker failed."""
        await self._begin()
        failed: dict[str, str] = {}
        try:
            for i, bucket in enumerate(buckets):
                last = i == len(buckets) - 1
                body = distributed_update_body(
                    [n for n, _ in bucket],
                    [str(t.dtype).removeprefix("torch.") for _, t in bucket],
                    [list(t.shape) for _, t in bucket],
                    self._group_name,
                    version if last else None,
                    flush and last,
                )
                for url, error in (await self._send(bucket, body)).items():
                    failed.setdefault(url, f"bucket {i + 1}/{len(buckets)}: {error}")
                if len(failed) == len(self._urls):
                    # Whether they received this bucket or not is unknown: the group may hold
                    # unreceived data, so it is not used again.
                    raise BrokenGroup(
                        "the weight update failed on every worker: " + "; ".join(failed.values())
                    )
        finally:
            await asyncio.shield(self._end())
        return failed

    async def _begin(self) -> None:
        results = await asyncio.gather(
            *(self._http.control(u, BEGIN_UPDATE, {}) for u in self._urls), return_exceptions=True
        )
        errors = {u: r for u, r in zip(self._urls, results, strict=True) if r is not None}
        for error in errors.values():
            if not isinstance(error, EngineError):
                raise error
        if errors:
            opened = [u for u in self._urls if u not in errors]
            await asyncio.shield(self._end(opened))
            raise EngineRequestError(
                "could not open a weight-update session (POST /begin_weight_update) on "
                + "; ".join(f"{u}: {e}" for u, e in errors.items())
                + "; nothing was sent"
            )

    async def _end(self, urls: list[str] | None = None) -> None:
        targets = self._urls if urls is None else urls
        results = await asyncio.gather(
            *(self._http.control(u, END_UPDATE, {}) for u in targets), return_exceptions=True
        )
        for url, result in zip(targets, results, strict=True):
            if isinstance(result, BaseException):
                log.warning(
                    "SGLang worker %s: POST /end_weight_update failed: %s (its session stays "
                    "open, and its next /begin_weight_update will be refused)",
                    url,
                    result,
                )

    async def _send(self, bucket: list, body: dict) -> dict[str, str]:
        """One bucket: every worker's HTTP call and our broadcast, concurrently."""
        send = asyncio.wrap_future(start_broadcast(self._group, [t for _, t in bucket]))
        calls = {
            asyncio.ensure_future(
                self._http.control(u, "/update_weights_from_distributed", body, self._update_s)
            ): u
            for u in self._urls
        }
        failed: dict[str, str] = {}
        pending: set[asyncio.Future] = {send, *calls}
        try:
            while pending:
                # Once a worker failed while the send waits, the rest may be stuck in the same
                # collective: give them the control timeout, not the group's.
                wait_s = self._http.control_s if failed and not send.done() else None
                done, pending = await asyncio.wait(
                    pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    raise BrokenGroup(
                        "the broadcast did not complete after worker(s) failed: "
                        + "; ".join(f"{u}: {e}" for u, e in failed.items())
                    )
                for task in done:
                    if task is send:
                        if task.exception() is not None:
                            raise BrokenGroup(
                                f"broadcasting the weights failed: {task.exception()}"
                            )
                        continue
                    error = task.exception()
                    if error is None:
                        continue
                    if not isinstance(error, EngineError):
                        raise error
                    failed[calls[task]] = str(error)
                    if (
                        await self._http.probe(calls[task], "/model_info", self._http.connect_s)
                        is None
                    ):
                        # It died: the collective can never complete over this group.
                        raise BrokenGroup(
                            f"SGLang worker {calls[task]} died during the update: {error}",
                            dead=[calls[task]],
                        )
                if failed and not send.done() and not (pending - {send}):
                    # Every worker answered and the send still waits: the ones that failed never
                    # took their part, and the collective cannot finish.
                    raise BrokenGroup(
                        "worker(s) refused the broadcast, which cannot complete without them: "
                        + "; ".join(f"{u}: {e}" for u, e in failed.items())
                    )
        finally:
            for task in calls:
                task.cancel()
        return failed


def group_layout(infos: list[dict[str, Any]]) -> tuple[list[int], int]:
    """(rank_offset per worker, world size) of a weight group: rank 0 is ours, then each
    worker takes tp_size ranks, rank_offset + tp_rank, whatever its pp_size (SGLang 0.5.23,
    srt/model_executor/model_runner_components/weight_updater.py: init_weights_update_group,
    `rank = rank_offset + self.tp_rank`). dp_size > 1 is refused there
    (tokenizer_control_mixin.py asserts dp_size == 1), so here too."""
    offsets, world_size = [], 1
    for info in infos:
        if int(info.get("dp_size", 1)) != 1:
            raise EngineRequestError(
                f"a worker runs dp_size={info['dp_size']}: SGLang takes weights over a group only "
                "with dp_size 1; launch one server per replica, or use engine.update_mode=disk"
            )
        offsets.append(world_size)
        world_size += int(info.get("tp_size", 1))
    return offsets, world_size


class GroupUpdates:
    """SGLangEngine's weight updates over a process group (a mixin: the engine provides the
    attributes below)."""

    _http: ControlClient
    _pool: WorkerPool
    _groups: dict[str, Any]
    _group_members: dict[str, list[str]]
    _bucket_bytes: int
    _update_s: float
    _pause_mode: PauseMode
    _groups_formed: int = 0

    async def _ensure_started(self) -> None: ...
    async def _pause(self, mode: str) -> None: ...
    async def resume(self) -> None: ...

    # An annotation, not a stub method: a stub here would shadow DiskUpdates' in the MRO.
    _report_dropped: Callable[[int, dict[str, str]], None]

    async def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        group_name: str = "gspo_weight_sync",
        backend: str = "nccl",
        timeout_s: float = 300.0,
        members: list[Worker] | None = None,
    ) -> None:
        """Form a process group of this process (rank 0) and every worker's ranks (`members`:
        those workers only). The HTTP calls and our own group init run concurrently: each
        blocks until all ranks join.

        Ranks and world size: group_layout."""
        await self._ensure_started()
        workers = self._pool.workers if members is None else members
        offsets, world_size = group_layout([w.info for w in workers])
        calls = [
            self._http.control(
                w.url,
                "/init_weights_update_group",
                init_group_body(master_address, master_port, off, world_size, group_name, backend),
                timeout_s,
            )
            for w, off in zip(workers, offsets, strict=True)
        ]
        own = asyncio.to_thread(
            init_weights_group,
            master_address,
            master_port,
            0,
            world_size,
            group_name,
            backend,
            timeout_s,
        )
        results = await asyncio.gather(own, *calls, return_exceptions=True)
        for result in results[1:] + results[:1]:
            if isinstance(result, BaseException):
                raise result
        self._groups[group_name] = results[0]
        self._group_members[group_name] = [w.url for w in workers]

    async def _group_over(self, members: list[Worker]) -> str:
        """The weight group of update_mode "nccl" over exactly `members` (NCCL with CUDA, else
        gloo): the current one if its members are these, else a new one under a new name, the
        old one destroyed first on our side and on its workers."""
        urls = [w.url for w in members]
        current = f"gspo_weight_sync_{self._groups_formed}"
        if current in self._groups and self._group_members.get(current) == urls:
            return current
        if current in self._groups:
            await self._drop_group(current)
        self._groups_formed += 1
        group_name = f"gspo_weight_sync_{self._groups_formed}"
        import torch

        address = address_towards(urls[0])
        await self.init_weights_update_group(
            address,
            free_port(address),
            group_name=group_name,
            backend="nccl" if torch.cuda.is_available() else "gloo",
            members=members,
        )
        return group_name

    async def _drop_group(self, group_name: str) -> None:
        """Destroy a weight group: ours first (a worker still receiving over it then fails at
        once instead of at the group's timeout), then POST /destroy_weights_update_group to each
        of its workers that answers."""
        group = self._groups.pop(group_name, None)
        if group is not None:
            await asyncio.to_thread(destroy_group, group)
        urls = self._group_members.pop(group_name, [])
        results = await asyncio.gather(
            *(
                self._http.control(
                    u,
                    "/destroy_weights_update_group",
                    {"group_name": group_name},
                    self._http.connect_s,
                )
                for u in urls
            ),
            return_exceptions=True,
        )
        for url, result in zip(urls, results, strict=True):
            if isinstance(result, BaseException):
                log.info(
                    "SGLang worker %s: destroying weight group %s: %s", url, group_name, result
                )

    async def _update_live_workers(
        self, named: list, version: int, replay_path: str | None
    ) -> None:
        """The nccl update of `update_weights`: over a group of the workers that answer now;
        one that dies mid-update leaves rotation and the whole update is sent again to the
        survivors over a new group (none of them serves in between: generation stays paused),
        so no survivor keeps part-loaded weights. Raises only when no worker is left."""
        buckets = bucket_by_bytes(named, self._bucket_bytes)
        async with self._paused():
            flush = flush_allowed(self._pool.pause_mode)
            async with self._pool.updating():
                failed = await self._send_to_live(buckets, version, flush)
                self._settle(failed, version, replay_path)
        self._report_dropped(version, failed)

    @contextlib.asynccontextmanager
    async def _paused(self) -> AsyncIterator[None]:
        """Generation paused (`pause_mode`) for the block, unless the caller paused already."""
        pause_here = not self._pool.paused
        if pause_here:
            await self._pause(self._pause_mode)
        try:
            yield
        finally:
            if pause_here:  # shielded: a cancel must not leave every worker paused
                await asyncio.shield(self.resume())

    def _settle(self, failed: dict[str, str], version: int, replay_path: str | None) -> None:
        """The workers that missed the update leave rotation; the rest serve `version`."""
        self._pool.settle_update(failed)
        replay = None if replay_path is None else (replay_path, version)
        self._pool.set_weights(version, replayable=replay)

    async def _send_to_live(self, buckets: list, version: int, flush: bool) -> dict[str, str]:
        lost: dict[str, str] = {}
        while True:
            reports = await self._pool.model_reports()
            members = [w for w in self._pool.workers if w.url in reports and w.url not in lost]
            if not members:
                raise EngineUnavailable(
                    f"no SGLang worker is left to take weight version {version}: "
                    + ("; ".join(f"{u}: {e}" for u, e in lost.items()) or "none answers")
                )
            group_name = await self._group_over(members)
            group = self._groups[group_name]
            session = SessionUpdate(
                self._http, [w.url for w in members], group, group_name, self._update_s
            )
            try:
                failed = await session.run(buckets, version, flush)
            except BrokenGroup as exc:
                await self._drop_group(group_name)
                # The send may fail before the dead worker's own call does: ask them all.
                answering = await self._pool.model_reports()
                dead = exc.dead or [w.url for w in members if w.url not in answering]
                if not dead:
                    raise
                for url in dead:
                    lost[url] = f"died during the weight update to version {version}"
                    self._pool.mark_down(url, lost[url])
                continue  # the whole update again, to the survivors
            absent = {w.url: "unreachable" for w in self._pool.workers if w not in members}
            return {**absent, **lost, **failed}

    async def update_weights_from_distributed(
        self,
        named_tensors: Iterable[tuple[str, Any]],
        version: int,
        *,
        group_name: str = "gspo_weight_sync",
        flush_cache: bool | None = None,
        replay_path: str | None = None,
    ) -> None:
        """Pause generation (`pause_mode`, unless the caller paused already), broadcast tensors
        (HF names, on the group's device) in buckets inside one update session per worker
        (sglang_update.py), continue; tag later tokens `version`. `flush_cache` None: flush
        unless the pause keeps requests running. `replay_path`: an HF directory with the same
        weights, replayed to a worker that missed this update."""
        if group_name not in self._groups:
            raise EngineRequestError(
                f"no weight update group {group_name!r}: call init_weights_update_group first"
            )
        buckets = bucket_by_bytes(list(named_tensors), self._bucket_bytes)
        async with self._paused():
            flush = flush_allowed(self._pool.pause_mode) if flush_cache is None else flush_cache
            async with self._pool.updating():
                session = SessionUpdate(
                    self._http,
                    self._pool.urls,
                    self._groups[group_name],
                    group_name,
                    self._update_s,
                )
                try:
                    failed = await session.run(buckets, version, flush)
                except BrokenGroup:
                    await self._drop_group(group_name)
                    raise
                self._settle(failed, version, replay_path)
        self._report_dropped(version, failed)


def address_towards(url: str) -> str:
    """This host's address on the route to `url`'s host (no packet is sent): what the workers
    dial to reach the weight group's rank 0."""
    host = urlsplit(url).hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, 9))
        return sock.getsockname()[0]


def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]
