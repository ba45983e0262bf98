"""The workers behind an SGLangEngine: sticky routing, health, and re-admission in sync.

- Routing: rendezvous hashing of a routing key over the worker URLs, so a trajectory stays on
  one worker (its prefix stays in that worker's radix cache); when a worker leaves, only its
  keys move, and they come back when it does.
- Rotation: a worker serves only while it is in rotation. It leaves rotation when a call to it
  fails (connection error, 5xx, failed /health), when it misses a weight update, or when it
  answers at another weight version than the engine's (it restarted from its boot checkpoint).
- Re-admission: a worker out of rotation comes back only through `recover()`: it must answer,
  report its weight version, and, if that is not the engine's, get the last disk update replayed
  first. A request whose worker is being recovered waits for it or goes to another worker in
  rotation. Recovery runs when a request picks the worker (after `down_cooldown_s`), or in
  `health()` as soon as the worker passes it.
- So no caller gets tokens from stale weights: a worker known to be out of sync never serves,
  and one that restarted unnoticed (found out by the version on its first answer, short of a
  probe per request) has that answer discarded by the engine, which retries the request.
- Weight state: the engine's version, the last replayable update and an update epoch (odd while
  an update is under way) live here, and recovery and updates hold one lock, so a replay can
  never land after a newer update.

- Versions: a worker's CURRENT weight version is read from /model_info (SGLang >= 0.5.23; before
  that /get_model_info). /server_info (/get_server_info) holds the launch arguments, including the
  launch-time weight_version, which an update does not change: it is read once per worker for
  tp/pp sizes and flags, never for the version. Which name a server answers to is found once.
- Paused workers: while the engine has paused generation, /health may hang (SGLang's health check
  generates a token, and a paused server generates nothing), so liveness is read from
  /model_info instead, which a paused server still answers.

With a router URL the router picks the worker, so rotation cannot be enforced per request;
control calls, health and replays still reach every worker.
Not here: the /generate call and its retries (sglang_engine.py), HTTP plumbing (sglang_http.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gspo_agents.rollout.engine import EngineError, EngineRequestError, EngineUnavailable
from gspo_agents.rollout.sglang_http import ControlClient
from gspo_agents.rollout.sglang_wire import disk_update_body, parse_version

log = logging.getLogger(__name__)

_TRAILING_UUID = re.compile(r"^(.+)-[0-9a-f]{32}$")
# Newest name first; a server answering 404 to it is an older one (found once per pool).
_INFO_PATHS = {
    "server": ("/server_info", "/get_server_info"),
    "model": ("/model_info", "/get_model_info"),
}


def route_key_of(request_id: str) -> str:
    """The sticky-routing key of a request id: the RolloutManager's "<trajectory uid>-<32 hex>"
    ids route by trajectory uid; any other id routes as a whole."""
    match = _TRAILING_UUID.match(request_id)
    return match.group(1) if match else request_id


def rank_workers(key: str, urls: Sequence[str]) -> list[str]:
    """`urls` in the order `key` prefers them (rendezvous hashing): first choice first."""

    def score(url: str) -> int:
        digest = hashlib.blake2b(f"{key}\0{url}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    return sorted(urls, key=score, reverse=True)


@dataclass(slots=True)
class Worker:
    url: str
    info: dict[str, Any] = field(default_factory=dict)  # launch arguments (server info)
    in_rotation: bool = True
    retry_at: float = 0.0  # monotonic; while out of rotation, requests skip it until then
    # It failed an update: its weights may be part new (a bucket or a load that failed after
    # others succeeded) whatever version it reports, so only a full reload brings it back.
    needs_replay: bool = False


class WorkerPool:
    """Worker list, routing and weight-version bookkeeping of one SGLangEngine."""

    def __init__(self, http: ControlClient, *, cooldown_s: float, update_timeout_s: float) -> None:
        self._http = http
        self._cooldown_s = cooldown_s
        self._update_s = update_timeout_s
        self.workers: list[Worker] = []
        self._orders: dict[str, list[Worker]] = {}  # pick's cache (see _order_of)
        self._orders_of: list[Worker] | None = None
        self._by_url: dict[str, Worker] = {}
        self.router: str | None = None
        self.version = 0
        self.start_version = 0  # what a worker reporting no version number ("default") runs
        self.last_update: tuple[str, int] | None = None  # (path, version) a replay reloads
        self.epoch = 0  # odd while a weight update is under way
        self._sync = asyncio.Lock()  # one replay or update at a time
        self.paused = False  # generation paused by the engine: /health may hang, not a death
        self.pause_mode: str | None = None  # the /pause_generation mode while paused
        self._paths: dict[str, str] = {}  # "server"/"model" -> the endpoint name servers answer
        self._listed_by_router = False  # the worker list is the router's: follow it

    # --- start-up ------------------------------------------------------------------------------

    async def start(self, urls: list[str], given_workers: list[str]) -> None:
        """Find the workers (behind a router or given) and their weight version."""
        if len(urls) == 1 and not given_workers:
            given_workers = await self._router_workers(urls[0])
            self._listed_by_router = bool(given_workers)
        if given_workers:
            self.router = urls[0]
        worker_urls = given_workers or urls
        self.workers = [Worker(u) for u in worker_urls]
        models = await asyncio.gather(*(self._probe(w) for w in self.workers))
        if all(m is None for m in models):
            raise EngineUnavailable(
                f"no SGLang worker answered at {worker_urls} (is the server up? check the URL, "
                f"port and firewall; connect timeout {self._http.connect_s} s)"
            )
        versions = [parse_version(m.get("weight_version"), -1) for m in models if m is not None]
        self.version = self.start_version = max(max(versions), 0)
        for worker, model in zip(self.workers, models, strict=True):
            if model is None:
                self._take_out(worker, "unreachable at start")

    async def follow_router(self) -> None:
        """Re-read the router's worker list (when it gave ours): a worker it dropped gets no
        more control calls; one it added is brought to the engine's weight version (the last
        update replayed) before it counts as in sync. A router that does not answer changes
        nothing. Called before every update and when an answer shows a worker out of sync."""
        if self.router is None or not self._listed_by_router:
            return
        listed = await self._router_workers(self.router)
        if not listed:
            return
        known = {w.url: w for w in self.workers}
        for url in known.keys() - set(listed):
            log.warning("SGLang worker %s left the router: no more calls to it", url)
        self.workers = [known.get(u) or Worker(u) for u in listed]
        for worker in self.workers:
            if worker.url not in known:
                log.warning(
                    "SGLang worker %s joined the router: bringing it to weight version %d",
                    worker.url,
                    self.version,
                )
                worker.in_rotation = False
                await self.recover(worker)

    async def model_reports(self) -> dict[str, dict[str, Any]]:
        """{url: /model_info} of every worker that answers now."""
        models = await asyncio.gather(*(self._get_info(w, "model") for w in self.workers))
        return {w.url: m for w, m in zip(self.workers, models, strict=True) if m is not None}

    async def _router_workers(self, url: str) -> list[str]:
        for path in ("/list_workers", "/workers"):
            resp = await self._http.probe(url, path)
            if resp is None:
                return []
            if resp.status_code == 200:
                body = resp.json()
                urls = body.get("urls") if isinstance(body, dict) else None
                if urls is None and isinstance(body, dict) and "workers" in body:
                    urls = [w.get("url") for w in body["workers"] if isinstance(w, dict)]
                if urls:
                    return [str(u).rstrip("/") for u in urls]
        return []

    async def _probe(self, worker: Worker) -> dict[str, Any] | None:
        """The worker's model info (its current `weight_version`), after reading its server
        info once; None if it cannot be reached."""
        if not worker.info:
            server = await self._get_info(worker, "server")
            if server is None:
                log.warning("SGLang worker %s unreachable", worker.url)
                return None
            worker.info = server or {"reachable": True}
        return await self._get_info(worker, "model")

    async def _get_info(self, worker: Worker, kind: str) -> dict[str, Any] | None:
        """GET the worker's `kind` info; None if unreachable, {} if it has no usable answer.
        The endpoint name is found once: the newest one, or the older one if that gives 404."""
        known = self._paths.get(kind)
        for path in (known,) if known else _INFO_PATHS[kind]:
            resp = await self._http.probe(worker.url, path)
            if resp is None:
                return None
            if resp.status_code == 404:
                continue  # an older server: try the older name
            if resp.status_code != 200:
                return {}
            self._paths.setdefault(kind, path)
            try:
                body = resp.json()
            except ValueError:
                return {}
            return body if isinstance(body, dict) else {}
        return {}

    # --- routing -------------------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        return [w.url for w in self.workers]

    def _order_of(self, key: str) -> list[Worker]:
        """`key`'s workers in preference order, cached per key while the worker list is the
        same list object (every change of members assigns a new one)."""
        if self._orders_of is not self.workers:
            self._orders, self._orders_of = {}, self.workers
            self._by_url = {w.url: w for w in self.workers}
        if len(self.workers) < 2:  # one order for every key: nothing to hash or cache
            return self.workers
        order = self._orders.get(key)
        if order is None:
            order = [self._by_url[u] for u in rank_workers(key, self.urls)]
            if len(self._orders) >= 65536:  # bounded: keys are per trajectory
                self._orders.clear()
            self._orders[key] = order
        return order

    def pick_now(self, key: str) -> str | None:
        """`pick`'s answer when it needs no wait (the router, or the key's first worker in
        rotation); None: ask `pick`."""
        if self.router is not None:
            return self.router
        order = self._order_of(key)
        return order[0].url if order and order[0].in_rotation else None

    async def pick(self, key: str) -> str | None:
        """The URL to send `key`'s request to, or None when no worker can serve in sync.

        Walks the key's preference order: the first worker in rotation wins; a worker out of
        rotation whose cooldown passed is recovered on the way, unless another recovery or an
        update holds the lock (then the request goes on to a worker in rotation). With none in
        rotation, waits for recovery of each in turn, cooldowns ignored."""
        if self.router is not None:
            return self.router
        order = self._order_of(key)
        now = time.monotonic()
        for worker in order:
            if worker.in_rotation:
                return worker.url
            if worker.retry_at <= now and not self._sync.locked() and await self.recover(worker):
                return worker.url
        for worker in order:
            if worker.in_rotation or await self.recover(worker):
                return worker.url
        return None

    # --- worker state --------------------------------------------------------------------------

    def reported_version(self, raw: Any) -> int:
        """The weight version behind a worker's `weight_version` field: absent (a build that does
        not report it) -> the engine's, as nothing tells otherwise; SGLang's boot value
        "default" -> the version at start; else the number it names."""
        return self.version if raw is None else parse_version(raw, self.start_version)

    def mark_down(self, url: str, reason: str) -> None:
        """A call to `url` failed: out of rotation, no retry before the cooldown."""
        for worker in self.workers:
            if worker.url == url:
                self._take_out(worker, reason)

    def stale_answer(self, url: str, version: int, epoch_before: int) -> bool:
        """Whether `url` answered at another version than the engine's with no update since the
        request started. If so the worker restarted unnoticed: it leaves rotation and is due for
        recovery at once, and the caller discards the answer."""
        if version == self.version:
            return False
        if epoch_before != self.epoch or epoch_before % 2:
            return False  # an update raced the request: its version is the caller's business
        for worker in self.workers:
            if worker.url == url and worker.in_rotation:
                self._take_out(worker, f"answered at version {version}, not {self.version}")
                worker.retry_at = 0.0
        return True

    def _take_out(self, worker: Worker, reason: str) -> None:
        if worker.in_rotation:
            log.warning("SGLang worker %s out of rotation: %s", worker.url, reason)
        worker.in_rotation = False
        worker.retry_at = time.monotonic() + self._cooldown_s

    async def recover(self, worker: Worker) -> bool:
        """Bring `worker` back into rotation at the engine's weight version; False if it cannot
        be reached or brought in sync (it then waits out another cooldown)."""
        async with self._sync:
            if worker.in_rotation:
                return True  # another request recovered it while we waited
            model = await self._probe(worker)
            if model is None:
                worker.retry_at = time.monotonic() + self._cooldown_s
                return False
            raw = model.get("weight_version")
            version = self.reported_version(raw)
            # A worker that does not report its version gets the replay whenever there is one.
            behind = version != self.version or (raw is None and self.last_update is not None)
            if (behind or worker.needs_replay) and not await self._replay(worker, version):
                worker.retry_at = time.monotonic() + self._cooldown_s
                return False
            worker.in_rotation = True
            worker.needs_replay = False
            log.info("SGLang worker %s is back at weight version %d", worker.url, self.version)
            return True

    async def _replay(self, worker: Worker, version: int) -> bool:
        if self.last_update is None:
            log.error(
                "SGLang worker %s runs weight version %d, the engine %d, and the last update "
                "cannot be replayed (none from disk since the broadcast one): it stays out of "
                "rotation until the next update_weights",
                worker.url,
                version,
                self.version,
            )
            return False
        path, last_version = self.last_update
        try:
            await self._http.control(
                worker.url,
                "/update_weights_from_disk",
                disk_update_body(path, last_version),
                self._update_s,
            )
        except EngineError as exc:
            log.warning(
                "SGLang worker %s: replaying version %d failed: %s", worker.url, last_version, exc
            )
            return False
        return True

    async def health(self) -> dict[str, bool]:
        """GET /health on every worker. One that fails leaves rotation; one that passes but is
        out of rotation, or reports another weight version, is recovered before this returns."""
        results = await asyncio.gather(*(self._check(w) for w in self.workers))
        return dict(zip(self.urls, results, strict=True))

    async def _check(self, worker: Worker) -> bool:
        if self.paused:
            return await self._check_paused(worker)
        resp = await self._http.probe(worker.url, "/health", self._http.connect_s)
        if resp is None or resp.status_code != 200:
            status = "unreachable" if resp is None else f"HTTP {resp.status_code}"
            self._take_out(worker, f"/health: {status}")
            return False
        if worker.in_rotation and self.epoch % 2 == 0:
            model = await self._probe(worker)
            reported = self.reported_version(None if model is None else model.get("weight_version"))
            if reported != self.version and self.epoch % 2 == 0:  # no update began meanwhile
                self._take_out(worker, f"reports version {reported}, not {self.version}")
        return worker.in_rotation or await self.recover(worker)

    async def _check_paused(self, worker: Worker) -> bool:
        """Liveness of a worker the engine paused: its model info answers (its /health may
        hang until generation continues). Its version is checked after the resume."""
        if await self._get_info(worker, "model") is None:
            self._take_out(worker, "unreachable while paused")
            return False
        return worker.in_rotation or await self.recover(worker)

    # --- weight updates and fan-out ------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def updating(self) -> AsyncIterator[None]:
        """Hold off recoveries while weights change on the workers; the epoch is odd inside."""
        async with self._sync:
            self.epoch += 1
            try:
                yield
            finally:
                self.epoch += 1

    def settle_update(self, failed: dict[str, str]) -> None:
        """After an update every worker took part in: the failed ones leave rotation, the rest
        are in sync and (re)join it."""
        for worker in self.workers:
            if worker.url in failed:
                self._take_out(worker, f"weight update failed: {failed[worker.url]}")
            worker.needs_replay = worker.url in failed
            worker.in_rotation = not worker.needs_replay

    def set_weights(self, version: int, replayable: tuple[str, int] | None) -> None:
        """Record a finished update; `replayable` is its (path, version) for a disk update and
        None for a broadcast one, which a restarted worker cannot be given again."""
        self.version = version
        self.last_update = replayable

    async def broadcast(
        self,
        path: str,
        body: dict,
        *,
        timeout_s: float | None = None,
        weight_update: bool = False,
    ) -> dict[str, str]:
        """POST to every worker: a router does not fan control calls out. Returns the workers
        that failed ({url: error}); each leaves rotation. Raises if every worker fails, or on a
        request error (a bad path, a bad body) of a call that is not a weight update.

        A weight update is judged per worker: SGLang 0.5.23 answers a failed load with 400
        {"success": false} (http_server.py: update_weights_from_disk), which on one worker of
        several is that worker's failure, not the fleet's. A worker that took it is in sync, so
        it (re)joins rotation."""
        results = await asyncio.gather(
            *(self._http.control(w.url, path, body, timeout_s) for w in self.workers),
            return_exceptions=True,
        )
        failed: dict[str, str] = {}
        request_errors = []
        for worker, result in zip(self.workers, results, strict=True):
            if isinstance(result, EngineRequestError) and not weight_update:
                raise result
            if isinstance(result, BaseException):
                if not isinstance(result, EngineError):
                    raise result  # a bug, not a worker failure
                failed[worker.url] = str(result)
                request_errors.append(isinstance(result, EngineRequestError))
                self._take_out(worker, f"{path} failed")
                worker.needs_replay |= weight_update
            elif weight_update:
                worker.in_rotation = True
                worker.needs_replay = False
        if failed and len(failed) == len(self.workers):
            error = EngineRequestError if all(request_errors) else EngineUnavailable
            raise error(f"{path} failed on every worker: " + "; ".join(failed.values()))
        for url, error_text in failed.items():
            log.warning("%s failed on %s (out of rotation): %s", path, url, error_text)
        return failed


__all__ = ["Worker", "WorkerPool", "rank_workers", "route_key_of"]
