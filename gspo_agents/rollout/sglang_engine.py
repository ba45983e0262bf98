"""SGLangEngine: the Engine protocol over SGLang's native HTTP API (one httpx.AsyncClient).

Talks to SGLang workers (or `python -m gspo_agents.serve`, which speaks the same subset), given
as several worker URLs or one router URL. What it does (protocol facts: shared/SGLANG.md):

- generate: POST /generate with `input_ids`, explicit sampling params and `return_logprob`; ids
  and log-probs come from `output_token_logprobs`. Each call gets a fresh uuid4 hex rid on the
  wire (fixed length, so no rid is a prefix of another; SGLang aborts by prefix); the caller's
  request_id maps to it for abort().
- Sticky routing: a trajectory stays on one worker so its prefix stays in that worker's radix
  cache. The routing key is `route_key=` if given, else the caller's request_id with a trailing
  "-<32 hex chars>" removed (the RolloutManager's "<trajectory uid>-<uuid4 hex>" ids thus route
  by trajectory uid), else the whole request_id. Rendezvous hashing picks the worker, so when one
  goes down only its trajectories move, and they come back when it does.
- Retries: connection errors and 5xx answers are retried with bounded exponential backoff on the
  next worker of the key's order (a failing worker cools down for `down_cooldown_s`); when every
  attempt fails, EngineUnavailable. 4xx answers raise EngineRequestError (not retried).
- Timeouts: connect timeout, NO read timeout on /generate (paused requests block server-side),
  an optional whole-request deadline `request_timeout_s` (EngineTimeout, after a server-side
  abort), keep-alive expiry under SGLang's 5 s. Control calls have a read timeout.
- Control calls (pause, continue, abort-all, weight updates, flush) go to every worker: a router
  does not fan them out. With a router URL the worker list comes from the router (/list_workers)
  or `worker_urls=`. A worker that misses a weight update is marked stale and gets the last
  update replayed before it serves again.
- Cancellation: a cancelled generate() aborts its rid server-side (shielded) before re-raising.

Not here: the multi-turn loop, partial-rollout resumption and staleness (the RolloutManager).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from gspo_agents.rollout.engine import (
    EngineError,
    EngineRequestError,
    EngineTimeout,
    EngineUnavailable,
    Generation,
    SamplingParams,
)
from gspo_agents.rollout.sglang_wire import (
    check_success,
    disk_update_body,
    error_message,
    json_body,
    parse_generation,
    parse_version,
    sampling_json,
)
from gspo_agents.rollout.weight_group import broadcast_tensors, destroy_group, init_weights_group

log = logging.getLogger(__name__)

_RETRYABLE = (httpx.TransportError,)  # connect/read/write/protocol errors, incl. dropped keep-alive
_TRAILING_UUID = re.compile(r"^(.+)-[0-9a-f]{32}$")


def route_key_of(request_id: str) -> str:
    """The sticky-routing key derived from a request id (see module docstring)."""
    match = _TRAILING_UUID.match(request_id)
    return match.group(1) if match else request_id


def _score(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\0{url}".encode(), digest_size=8).digest(), "big")


@dataclass(slots=True)
class _Worker:
    url: str
    info: dict[str, Any] = field(default_factory=dict)
    down_until: float = 0.0  # monotonic time before which routing avoids it
    stale: bool = False  # missed a weight update: replay it before serving


@dataclass(slots=True)
class _InFlight:
    wire_rid: str
    url: str


class SGLangEngine:
    """Engine over SGLang HTTP workers (see module docstring)."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        worker_urls: Sequence[str] | None = None,
        connect_timeout_s: float = 5.0,
        request_timeout_s: float | None = None,
        control_timeout_s: float = 60.0,
        update_timeout_s: float = 600.0,
        max_attempts: int = 4,
        backoff_s: float = 0.2,
        max_backoff_s: float = 2.0,
        down_cooldown_s: float = 2.0,
        keepalive_expiry_s: float = 4.0,
        max_connections: int = 1024,
    ) -> None:
        if not urls:
            raise ValueError("SGLangEngine needs at least one URL (engine.urls=[http://host:port])")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self._urls = [u.rstrip("/") for u in urls]
        self._given_workers = [u.rstrip("/") for u in worker_urls or ()]
        self._router: str | None = None
        self._workers: list[_Worker] = []
        self._connect_s = connect_timeout_s
        self._deadline_s = request_timeout_s
        self._control_s = control_timeout_s
        self._update_s = update_timeout_s
        self._attempts = max_attempts
        self._backoff = (backoff_s, max_backoff_s)
        self._cooldown_s = down_cooldown_s
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(control_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=keepalive_expiry_s,
            ),
        )
        self._gen_timeout = httpx.Timeout(None, connect=connect_timeout_s, pool=None)
        self._version = 0
        self._last_update: tuple[str, int] | None = None
        self._update_epoch = 0  # weight updates done; tells stale answers from racing ones
        self._inflight: dict[str, _InFlight] = {}
        self._start_lock = asyncio.Lock()
        self._revive_lock = asyncio.Lock()
        self._started = False
        self._groups: dict[str, Any] = {}

    # --- start-up ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Probe the URLs (router or workers) once; generate() calls this lazily."""
        async with self._start_lock:
            if self._started:
                return
            if len(self._urls) == 1 and not self._given_workers:
                workers = await self._router_workers(self._urls[0])
                if workers:
                    self._router = self._urls[0]
                    self._given_workers = workers
            elif self._given_workers:
                self._router = self._urls[0]
            urls = self._given_workers or self._urls
            self._workers = [_Worker(u) for u in urls]
            infos = await asyncio.gather(*(self._probe(w) for w in self._workers))
            if not any(infos):
                raise EngineUnavailable(
                    f"no SGLang worker answered at {urls} (is the server up? check the URL, "
                    f"port and firewall; connect timeout {self._connect_s} s)"
                )
            versions = [parse_version(i.get("weight_version"), -1) for i in infos if i]
            self._version = max(max(versions), 0)
            self._started = True

    async def _router_workers(self, url: str) -> list[str]:
        for path in ("/list_workers", "/workers"):
            try:
                resp = await self._client.get(url + path)
            except httpx.TransportError:
                return []
            if resp.status_code == 200:
                body = resp.json()
                urls = body.get("urls") if isinstance(body, dict) else None
                if urls is None and isinstance(body, dict) and "workers" in body:
                    urls = [w.get("url") for w in body["workers"] if isinstance(w, dict)]
                if urls:
                    return [str(u).rstrip("/") for u in urls]
        return []

    async def _probe(self, worker: _Worker) -> dict[str, Any]:
        """Server info (newer builds: /server_info), plus /get_model_info; {} if unreachable."""
        info: dict[str, Any] = {}
        for path in ("/get_server_info", "/server_info", "/model_info", "/get_model_info"):
            try:
                resp = await self._client.get(worker.url + path)
            except httpx.TransportError as exc:
                log.warning("SGLang worker %s unreachable: %s", worker.url, exc)
                worker.down_until = time.monotonic() + self._cooldown_s
                return {}
            if resp.status_code == 200:
                try:
                    info.update(resp.json())
                except ValueError:
                    continue  # not JSON: try the next endpoint
                if path.endswith("model_info") or "weight_version" in info:
                    break
        worker.info = info
        return info or {"reachable": True}

    async def _ensure_started(self) -> None:
        if not self._started:
            await self.start()

    # --- Engine protocol -----------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def worker_urls(self) -> list[str]:
        return [w.url for w in self._workers]

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        request_id: str,
        *,
        route_key: str | None = None,
    ) -> Generation:
        """Continue `input_ids` on the worker `route_key` (default: derived from request_id)
        maps to. An abort returns the tokens so far with finish_reason 'abort'."""
        await self._ensure_started()
        key = route_key or route_key_of(request_id)
        payload = {
            "input_ids": list(input_ids),
            "sampling_params": sampling_json(sampling),
            "return_logprob": True,
            "logprob_start_len": -1,
            "stream": False,
        }
        work = self._generate_with_retries(payload, sampling, request_id, key)
        try:
            if self._deadline_s is None:
                return await work
            return await asyncio.wait_for(work, self._deadline_s)
        except asyncio.TimeoutError:
            raise EngineTimeout(
                f"request {request_id} took longer than request_timeout_s={self._deadline_s}"
            ) from None
        finally:
            self._inflight.pop(request_id, None)

    async def _generate_with_retries(
        self, payload: dict[str, Any], sampling: SamplingParams, request_id: str, key: str
    ) -> Generation:
        failures: list[str] = []
        for attempt in range(self._attempts):
            if attempt:
                await asyncio.sleep(min(self._backoff[0] * 2 ** (attempt - 1), self._backoff[1]))
            url = await self._pick(key, attempt)
            epoch = self._update_epoch
            wire = uuid.uuid4().hex
            self._inflight[request_id] = _InFlight(wire, url)
            try:
                resp = await self._client.post(
                    url + "/generate", json=payload | {"rid": wire}, timeout=self._gen_timeout
                )
            except asyncio.CancelledError:
                await asyncio.shield(self._abort_quietly(url, wire))
                raise
            except _RETRYABLE as exc:
                failures.append(f"{url}: {type(exc).__name__}: {exc}")
                self._mark_down(url)
                if not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
                    # It may have arrived and still run on a live server: do not leak it.
                    await asyncio.shield(self._abort_quietly(url, wire))
                continue
            if resp.status_code >= 500:
                failures.append(f"{url}: HTTP {resp.status_code}: {error_message(resp)}")
                self._mark_down(url)
                continue
            if resp.status_code >= 400:
                raise EngineRequestError(
                    f"{url}/generate rejected the request: {error_message(resp)}"
                )
            gen = parse_generation(json_body(resp), self._version, sampling.max_new_tokens)
            if epoch == self._update_epoch and gen.weight_version != self._version:
                self._notice_stale(url, gen.weight_version)
            return gen
        raise EngineUnavailable(
            f"/generate failed {self._attempts} times: " + "; ".join(failures[-3:])
        )

    async def abort(self, request_id: str | None = None) -> None:
        await self._ensure_started()
        if request_id is None:
            await self._broadcast("/abort_request", {"rid": "", "abort_all": True})
            return
        flight = self._inflight.get(request_id)
        if flight is None:
            return  # already finished (or never sent): nothing to abort
        if self._router is None:
            await self._control(flight.url, "/abort_request", {"rid": flight.wire_rid})
        else:  # the router chose the worker; the rid is unique, so asking all is safe
            await self._broadcast("/abort_request", {"rid": flight.wire_rid})

    async def pause(self) -> None:
        await self._ensure_started()
        await self._broadcast("/pause_generation", {"mode": "abort"})

    async def resume(self) -> None:
        await self._ensure_started()
        await self._broadcast("/continue_generation", {})

    async def update_weights(self, path: str, version: int) -> None:
        """Every worker loads HF safetensors from `path` (a filesystem all workers see)."""
        await self._ensure_started()
        await self._broadcast(
            "/update_weights_from_disk",
            disk_update_body(path, version),
            timeout=self._update_s,
            weight_update=True,
        )
        self._version = version
        self._last_update = (path, version)
        self._update_epoch += 1

    async def flush_cache(self, attempts: int = 10) -> None:
        """Flush every worker's prefix cache; SGLang answers 400 while requests run: retry."""
        await self._ensure_started()
        for worker in self._workers:
            for attempt in range(attempts):
                resp = await self._request(
                    worker.url, "POST", "/flush_cache", None, self._control_s
                )
                if resp.status_code < 400:
                    break
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
            else:
                raise EngineError(f"{worker.url}/flush_cache kept failing: {error_message(resp)}")

    async def health(self) -> bool:
        try:
            return any((await self.worker_health()).values())
        except EngineUnavailable:
            return False

    async def worker_health(self) -> dict[str, bool]:
        await self._ensure_started()

        async def one(url: str) -> bool:
            try:
                resp = await self._client.get(url + "/health", timeout=self._connect_s)
            except httpx.TransportError:
                return False
            return resp.status_code == 200

        results = await asyncio.gather(*(one(w.url) for w in self._workers))
        return dict(zip(self.worker_urls, results, strict=True))

    async def close(self) -> None:
        await self._client.aclose()
        for group in self._groups.values():
            destroy_group(group)
        self._groups.clear()

    # --- routing and worker state --------------------------------------------------------------

    async def _pick(self, key: str, attempt: int) -> str:
        if self._router is not None:
            return self._router
        await self._revive_due()
        now = time.monotonic()
        order = sorted(self._workers, key=lambda w: _score(key, w.url), reverse=True)
        ready = [w for w in order if w.down_until <= now and not w.stale]
        candidates = ready or [w for w in order if not w.stale] or order
        return candidates[attempt % len(candidates)].url

    def _notice_stale(self, url: str, version: int) -> None:
        """A worker answered with another version than the last update set (it restarted from
        its original checkpoint): replay the last update before routing to it again."""
        if self._router is not None or self._last_update is None:
            return
        for worker in self._workers:
            if worker.url == url and not worker.stale:
                log.warning("worker %s serves version %s, not %s", url, version, self._version)
                worker.stale = True

    def _mark_down(self, url: str) -> None:
        for worker in self._workers:
            if worker.url == url:
                worker.down_until = time.monotonic() + self._cooldown_s

    async def _revive_due(self) -> None:
        """Stale workers whose cooldown passed get the last weight update replayed."""
        now = time.monotonic()
        due = [w for w in self._workers if w.stale and w.down_until <= now]
        if not due or self._revive_lock.locked():
            return
        async with self._revive_lock:
            for worker in due:
                try:
                    if self._last_update is not None:
                        path, version = self._last_update
                        resp = await self._request(
                            worker.url,
                            "POST",
                            "/update_weights_from_disk",
                            disk_update_body(path, version),
                            self._update_s,
                        )
                        check_success(worker.url, "/update_weights_from_disk", resp)
                    worker.stale = False
                    log.info("SGLang worker %s is back and in sync", worker.url)
                except EngineError as exc:
                    worker.down_until = time.monotonic() + self._cooldown_s
                    log.warning("SGLang worker %s still unavailable: %s", worker.url, exc)

    # --- HTTP helpers --------------------------------------------------------------------------

    async def _request(
        self, url: str, method: str, path: str, body: dict | None, timeout_s: float
    ) -> httpx.Response:
        """One control call with bounded retries of connection errors."""
        failures = []
        for attempt in range(self._attempts):
            if attempt:
                await asyncio.sleep(min(self._backoff[0] * 2 ** (attempt - 1), self._backoff[1]))
            try:
                return await self._client.request(
                    method,
                    url + path,
                    json=body,
                    timeout=httpx.Timeout(timeout_s, connect=self._connect_s),
                )
            except httpx.TimeoutException as exc:
                if not isinstance(exc, httpx.ConnectTimeout):
                    raise EngineTimeout(f"{url}{path} timed out after {timeout_s} s") from exc
                failures.append(f"{type(exc).__name__}")
            except _RETRYABLE as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
        raise EngineUnavailable(f"{url}{path} unreachable: " + "; ".join(failures[-2:]))

    async def _control(self, url: str, path: str, body: dict, timeout: float | None = None) -> None:
        resp = await self._request(url, "POST", path, body, timeout or self._control_s)
        check_success(url, path, resp)

    async def _broadcast(
        self, path: str, body: dict, *, timeout: float | None = None, weight_update: bool = False
    ) -> None:
        """POST to every worker. A worker that fails is marked down (and stale if this was a
        weight update); only if every worker fails does the call raise."""
        results = await asyncio.gather(
            *(self._control(w.url, path, body, timeout) for w in self._workers),
            return_exceptions=True,
        )
        errors = []
        for worker, result in zip(self._workers, results, strict=True):
            if isinstance(result, EngineRequestError):
                raise result
            if isinstance(result, BaseException):
                if not isinstance(result, EngineError):
                    raise result  # a bug, not a worker failure
                errors.append(f"{worker.url}: {result}")
                worker.down_until = time.monotonic() + self._cooldown_s
                worker.stale = worker.stale or weight_update
            elif weight_update:
                worker.stale = False
        if errors and len(errors) == len(self._workers):
            raise EngineUnavailable(f"{path} failed on every worker: " + "; ".join(errors))
        for error in errors:
            log.warning("%s failed on a worker (marked down): %s", path, error)

    async def _abort_quietly(self, url: str, wire_rid: str) -> None:
        try:
            if self._router is None:
                await self._control(url, "/abort_request", {"rid": wire_rid}, self._connect_s)
            else:
                await self._broadcast("/abort_request", {"rid": wire_rid}, timeout=self._connect_s)
        except EngineError as exc:
            log.warning("could not abort %s on %s: %s", wire_rid, url, exc)

    # --- distributed (NCCL) weight update ------------------------------------------------------

    async def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        group_name: str = "gspo_weight_sync",
        backend: str = "nccl",
        timeout_s: float = 300.0,
    ) -> None:
        """Form a process group of this process (rank 0) and every worker's ranks. The HTTP
        calls and our own group init run concurrently: each blocks until all ranks join."""
        await self._ensure_started()
        offsets, world_size = [], 1
        for worker in self._workers:
            offsets.append(world_size)
            world_size += int(worker.info.get("tp_size", 1)) * int(worker.info.get("pp_size", 1))
        calls = [
            self._control(
                w.url,
                "/init_weights_update_group",
                {
                    "master_address": master_address,
                    "master_port": master_port,
                    "rank_offset": off,
                    "world_size": world_size,
                    "group_name": group_name,
                    "backend": backend,
                },
                timeout_s,
            )
            for w, off in zip(self._workers, offsets, strict=True)
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

    async def update_weights_from_distributed(
        self,
        named_tensors: Iterable[tuple[str, Any]],
        version: int,
        *,
        group_name: str = "gspo_weight_sync",
        flush_cache: bool = True,
    ) -> None:
        """Broadcast tensors (HF names, on the group's device) from rank 0 while every worker
        receives them in the same order; tag later tokens `version`."""
        if group_name not in self._groups:
            raise EngineRequestError(
                f"no weight update group {group_name!r}: call init_weights_update_group first"
            )
        items = list(named_tensors)
        body = {
            "names": [n for n, _ in items],
            "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in items],
            "shapes": [list(t.shape) for _, t in items],
            "group_name": group_name,
            "flush_cache": flush_cache,
            "weight_version": str(version),
        }
        group = self._groups[group_name]
        calls = [
            self._control(w.url, "/update_weights_from_distributed", body, self._update_s)
            for w in self._workers
        ]
        send = asyncio.to_thread(broadcast_tensors, group, [t for _, t in items])
        results = await asyncio.gather(send, *calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        self._version = version
        self._update_epoch += 1


__all__ = [
    "SGLangEngine",
    "init_weights_group",
    "parse_generation",
    "route_key_of",
    "sampling_json",
]
