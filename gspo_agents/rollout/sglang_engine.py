"""SGLangEngine: the Engine protocol over SGLang's native HTTP API.

Talks to SGLang workers (or `python -m gspo_agents.serve`, which speaks the same subset), given
as several worker URLs or one router URL. What it does (protocol facts: shared/SGLANG.md):

- HTTP: /generate goes through sglang_generate.py (a minimal keep-alive HTTP/1.1 client, a pool
  per worker: httpx's pool cost grew with the number of connections, measured there); control
  calls through sglang_http.py (httpx).
- generate: POST /generate with `input_ids`, explicit sampling params and `return_logprob`; ids
  and log-probs come from `output_token_logprobs`. Each call gets a fresh 32-hex-char rid on the
  wire (the engine's random prefix and a counter; fixed length, so no rid is a prefix of another:
  SGLang aborts by prefix); the caller's
  request_id maps to it for abort().
- Sticky routing: a trajectory stays on one worker so its prefix stays in that worker's radix
  cache. The routing key is `route_key=` (the RolloutManager passes the trajectory uid), else the
  caller's request_id with a trailing "-<32 hex chars>" removed, else the whole request_id.
  Given worker URLs, we pick the worker (sglang_workers.py: rendezvous hashing); behind a router
  every /generate carries the key in the `X-SMG-Routing-Key` header, which sglang_router 0.3.x
  routes by under `--policy manual` (docs/sglang.md).
- Retries: connection errors and 5xx answers are retried with bounded exponential backoff on the
  next worker of the key's order (a failing worker leaves rotation for `down_cooldown_s`); when
  every attempt fails, EngineUnavailable. 4xx answers raise EngineRequestError (not retried).
- Weight versions: read from /model_info (sglang_workers.py). A worker serves only at the
  engine's weight version. One that missed an
  update, failed, or answers at another version (it restarted unnoticed; that answer is
  discarded and the request retried) gets the last disk update replayed before it serves again.
- Timeouts: connect timeout, NO read timeout on /generate (paused requests block server-side),
  an optional whole-request deadline `request_timeout_s` (EngineTimeout, after a server-side
  abort), keep-alive expiry under SGLang's 5 s. Control calls have a read timeout.
- Control calls (pause, continue, abort-all, weight updates, flush) go to every worker: a router
  does not fan them out. With a router URL the worker list comes from the router (/list_workers,
  /workers), re-read before every update and when an answer comes at another version (a worker
  it added is brought to the current version first), or from `worker_urls=`.
- Starting weights: `sync_start_weights` (before step 1) pushes the learner's starting weights
  to workers that report others; "default" (SGLang's boot version) is then no learner version.
- Cancellation: a cancelled generate() aborts its rid server-side (shielded) before re-raising.
- Weight updates (`update_mode`): "disk" posts /update_weights_from_disk to every worker;
  "nccl" broadcasts the same HF directory's tensors over a process group, in buckets inside one
  update session per worker (sglang_update.py). A worker that fails leaves rotation and gets the
  update replayed later; the engine moves on with the rest (`last_update_dropped` names the
  ones dropped) and raises only when every worker failed. In "nccl" mode a worker that dies
  mid-update leaves and the whole update is sent again to the rest over a new group.
- A LoRA run's update goes as an adapter (/load_lora_adapter, then `lora_path` on every
  /generate) where every worker runs with --enable-lora and a fitting pool, else as the merged
  weights by disk or NCCL (sglang_lora.py).
- NCCL updates pause generation first (`pause_mode`, default "abort"), broadcast, then continue:
  unpaused, SGLang would wait for in-flight generations to finish before it receives, while the
  learner is already broadcasting. A caller that paused already keeps its pause (the
  RolloutManager pauses with `pause_mode` around every update, disk or NCCL). Requests an
  in_place / retract pause kept come back with per-token versions (meta_info.weight_versions).
- Seeds: `sampling_seed` takes effect only on servers launched with
  --enable-deterministic-inference; the first seeded request warns once if a worker's server
  info does not say so.

Not here: the multi-turn loop, partial-rollout resumption and staleness (the RolloutManager).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gspo_agents.rollout.engine import (
    EngineError,
    EngineRequestError,
    EngineTimeout,
    EngineUnavailable,
    Generation,
    PauseMode,
    SamplingParams,
    check_pause_mode,
)
from gspo_agents.rollout.sglang_body import EncodedPrefixes, rest_tail
from gspo_agents.rollout.sglang_disk_update import (  # noqa: F401 - StartWeightsMismatch: API
    DiskUpdates,
    StartWeightsMismatch,
)
from gspo_agents.rollout.sglang_generate import GenerateClient, GenerateLost, GenerateNotSent
from gspo_agents.rollout.sglang_http import ControlClient, backoff_s
from gspo_agents.rollout.sglang_update import GroupUpdates
from gspo_agents.rollout.sglang_wire import (
    ROUTING_KEY_HEADER,
    error_message,
    error_text,
    json_bytes,
    parse_generation,
    pause_body,
    routes_enabled,
    sampling_json,
)
from gspo_agents.rollout.sglang_workers import WorkerPool, rank_workers, route_key_of
from gspo_agents.rollout.weight_group import (
    init_weights_group,
)

log = logging.getLogger(__name__)

_TIMEOUT_CM = hasattr(asyncio, "timeout")  # Python 3.11+


def _retrieved(probe: asyncio.Future) -> None:
    """A probe whose callers were all cancelled: its error was still seen (no asyncio warning
    "exception was never retrieved"); the next call probes again and raises it."""
    if not probe.cancelled():
        probe.exception()


@dataclass(slots=True)
class _InFlight:
    wire_rid: str
    url: str


class SGLangEngine(GroupUpdates, DiskUpdates):
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
        pause_mode: PauseMode = "abort",
        update_mode: str = "disk",
        update_bucket_mb: float = 512.0,
        return_routed_experts: bool = False,
    ) -> None:
        if not urls:
            raise ValueError("SGLangEngine needs at least one URL (engine.urls=[http://host:port])")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        check_pause_mode(pause_mode)
        if update_mode not in ("disk", "nccl"):
            raise ValueError(f"update_mode={update_mode!r} is not one of ['disk', 'nccl']")
        if update_bucket_mb <= 0:
            raise ValueError(f"update_bucket_mb must be positive, got {update_bucket_mb}")
        self._pause_mode = pause_mode
        self._return_routes = return_routed_experts  # checked against the workers at start
        self._update_mode = update_mode
        self._bucket_bytes = int(update_bucket_mb * 2**20)
        # Workers a weight update failed on last time ({url: error}); empty when all took it.
        self.last_update_dropped: dict[str, str] = {}
        self._seed_checked = False
        self._urls = [u.rstrip("/") for u in urls]
        self._given_workers = [u.rstrip("/") for u in worker_urls or ()]
        self._deadline_s = request_timeout_s
        self._update_s = update_timeout_s
        self._http = ControlClient(
            connect_timeout_s=connect_timeout_s,
            control_timeout_s=control_timeout_s,
            max_attempts=max_attempts,
            backoff=(backoff_s, max_backoff_s),
            keepalive_expiry_s=keepalive_expiry_s,
            max_connections=max_connections,
        )
        self._pool = WorkerPool(
            self._http, cooldown_s=down_cooldown_s, update_timeout_s=update_timeout_s
        )
        # /generate has its own client (httpx's pool walk grew with N; sglang_generate.py)
        self._gen = GenerateClient(
            connect_timeout_s=connect_timeout_s,
            keepalive_expiry_s=keepalive_expiry_s,
            max_connections=max_connections,
        )
        self._prefixes = EncodedPrefixes()  # per route key: the encoded ids last sent
        # Wire rids: this engine's random 64-bit prefix and a counter (unique like a uuid4 per
        # call, at a tenth of its cost per turn).
        self._rid_prefix, self._rid_count = uuid.uuid4().hex[:16], itertools.count()
        self._inflight: dict[str, _InFlight] = {}
        self._starting: asyncio.Future[None] | None = None  # the probe callers share
        self._started = False
        self._groups: dict[str, Any] = {}
        self._adapters: list[str] = []  # LoRA adapters loaded on the workers, oldest first
        self._lora_name: str | None = None  # the one every /generate names (lora_path)
        self._said_merged = False
        self._group_members: dict[str, list[str]] = {}

    async def start(self) -> None:
        """Probe the URLs (router or workers) once; generate() calls this lazily.

        Callers that come while the probe runs share it and wake together (behind a lock they
        went on one per event-loop turn: 1,024 episodes starting at once reached the engine over
        1,024 turns). A failed probe fails them all; the next call probes again. Cancelling a
        caller does not cancel the probe the others wait on."""
        if self._started:
            return
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._probe())
            self._starting.add_done_callback(_retrieved)
        starting = self._starting
        try:
            await asyncio.shield(starting)
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None

    async def _probe(self) -> None:
        await self._pool.start(self._urls, self._given_workers)
        if self._return_routes:
            self._check_routes_enabled()
        self._started = True

    def _check_routes_enabled(self) -> None:
        """Engine-side routing replay needs every worker launched to return routed experts."""
        for worker in self._pool.workers:
            enabled = routes_enabled(worker.info)
            if not enabled:
                said = "reports it off" if enabled is False else "does not report it"
                raise EngineRequestError(
                    f"routing_replay_source=engine needs the engine's routed experts, but SGLang "
                    f"worker {worker.url} was not launched with --enable-return-routed-experts "
                    f"(its /server_info {said}). Relaunch it with that flag (and a MoE model), "
                    "or set algorithm.routing_replay_source=trainer."
                )

    async def _ensure_started(self) -> None:
        if not self._started:
            await self.start()

    # --- Engine protocol -----------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._pool.version

    @property
    def pause_mode(self) -> PauseMode:
        return self._pause_mode

    @property
    def returns_routed_experts(self) -> bool:
        return self._return_routes

    @property
    def worker_urls(self) -> list[str]:
        return self._pool.urls

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        request_id: str,
        *,
        route_key: str | None = None,
        routed_experts_start_len: int | None = None,
    ) -> Generation:
        """Continue `input_ids` on the worker `route_key` (default: derived from request_id)
        maps to. An abort returns the tokens so far with finish_reason 'abort'.
        `routed_experts_start_len` (needs return_routed_experts=True): also return the MoE
        routes of positions [start, prompt + output - 1)."""
        if routed_experts_start_len is not None and not self._return_routes:
            raise EngineRequestError(
                "routed experts asked of an SGLangEngine built without return_routed_experts"
            )
        if not self._started:
            await self.start()
        key = route_key or route_key_of(request_id)
        if sampling.seed is not None and not self._seed_checked:
            self._warn_unless_deterministic()
        # No copy of the history: the body is built from `input_ids` at once (one await in).
        work = self._generate_with_retries(
            input_ids, sampling, request_id, key, routed_experts_start_len
        )
        try:
            if self._deadline_s is None:
                return await work
            if _TIMEOUT_CM:  # no extra task per request (wait_for wraps `work` in one)
                async with asyncio.timeout(self._deadline_s):  # type: ignore[attr-defined]  # 3.11+: _TIMEOUT_CM
                    return await work
            return await asyncio.wait_for(work, self._deadline_s)
        except asyncio.TimeoutError:
            raise EngineTimeout(
                f"request {request_id} took longer than request_timeout_s={self._deadline_s}"
            ) from None
        finally:
            self._inflight.pop(request_id, None)

    async def _generate_with_retries(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        request_id: str,
        key: str,
        routes_start: int | None,
    ) -> Generation:
        """Up to max_attempts tries on the key's workers in order. An answer from a worker at
        the wrong weight version is discarded and retried without using up an attempt (at most
        once per worker): that worker is brought back in sync first, or another one serves."""
        failures: list[str] = []
        attempt = discarded = 0
        while attempt < self._http.attempts:
            if failures:
                await asyncio.sleep(backoff_s(max(attempt, 1), *self._http.backoff))
            url = self._pool.pick_now(key) or await self._pool.pick(key)
            if url is None:
                failures.append(
                    f"no worker can serve at weight version {self._pool.version} (all down, "
                    "or behind with no update to replay)"
                )
                attempt += 1
                continue
            epoch = self._pool.epoch
            try:
                gen = await self._post_generate(
                    url, input_ids, sampling, request_id, key, routes_start
                )
            except EngineRequestError:
                raise
            except EngineError as exc:
                failures.append(str(exc))
                self._pool.mark_down(url, str(exc))
                await self._pool.follow_router()  # the router's members may have changed
                attempt += 1
                continue
            if not self._pool.stale_answer(url, gen.weight_version, epoch):
                return gen
            if self._pool.router is not None:
                # A worker the router sends to is out of sync: one it added since we last
                # looked, or one that restarted. Bring them in sync, then ask again.
                await self._pool.follow_router()
                await self._pool.health()
            discarded += 1
            failures.append(f"{url}: answered at weight version {gen.weight_version}, discarded")
            if discarded > len(self._pool.workers):
                attempt += 1
        raise EngineUnavailable(
            f"/generate failed {self._http.attempts} times: " + "; ".join(failures[-3:])
        )

    async def _post_generate(
        self,
        url: str,
        input_ids: list[int],
        sampling: SamplingParams,
        request_id: str,
        key: str,
        routes_start: int | None = None,
    ) -> Generation:
        """One POST /generate to `url`; transport errors and 5xx become EngineError."""
        wire = f"{self._rid_prefix}{next(self._rid_count):016x}"
        self._inflight[request_id] = _InFlight(wire, url)
        payload = self._prefixes.view_with_tail(  # no copy of the history's bytes
            key, input_ids, rest_tail(sampling, wire, routes_start, self._lora_name)
        )
        headers = {ROUTING_KEY_HEADER: key, "content-type": "application/json"}
        try:
            status, raw_body = await self._gen.post(url + "/generate", payload, headers)
        except asyncio.CancelledError:
            await asyncio.shield(self._abort_quietly(url, wire))
            raise
        except GenerateNotSent as exc:
            raise EngineError(f"{url}: {exc}") from exc
        except GenerateLost as exc:
            # It may have arrived and still run on a live server: do not leak it.
            await asyncio.shield(self._abort_quietly(url, wire))
            raise EngineError(f"{url}: {exc}") from exc
        if status >= 500:
            raise EngineError(f"{url}: HTTP {status}: {error_text(raw_body)}")
        if status >= 400:
            raise EngineRequestError(f"{url}/generate rejected the request: {error_text(raw_body)}")
        body = json_bytes(f"{url}/generate", raw_body)
        meta = body.get("meta_info") if isinstance(body, dict) else None
        raw = meta.get("weight_version") if isinstance(meta, dict) else None
        routes = None if routes_start is None else (len(input_ids), routes_start)
        version = self._pool.reported_version(raw)
        return parse_generation(
            body, version, sampling.max_new_tokens, routes, boot_version=self._pool.start_version
        )

    async def abort(self, request_id: str | None = None) -> None:
        await self._ensure_started()
        if request_id is None:
            await self._pool.broadcast("/abort_request", {"rid": "", "abort_all": True})
            return
        flight = self._inflight.get(request_id)
        if flight is None:
            return  # already finished (or never sent): nothing to abort
        if self._pool.router is None:
            await self._http.control(flight.url, "/abort_request", {"rid": flight.wire_rid})
        else:  # the router chose the worker; the rid is unique, so asking all is safe
            await self._pool.broadcast("/abort_request", {"rid": flight.wire_rid})

    async def pause(self, mode: PauseMode = "abort") -> None:
        """POST /pause_generation `mode` to every worker (the RolloutManager passes
        `pause_mode`). Weight updates while paused ask for a cache flush only where 0.5.23
        allows one (sglang_wire.flush_allowed: not under in_place)."""
        await self._ensure_started()
        await self._pause(check_pause_mode(mode))

    async def resume(self) -> None:
        await self._ensure_started()
        await self._pool.broadcast("/continue_generation", {})
        self._pool.paused = False
        self._pool.pause_mode = None

    async def _pause(self, mode: str) -> None:
        self._pool.paused = True  # before the call: a health check meanwhile must not hit /health
        self._pool.pause_mode = mode
        try:
            await self._pool.broadcast("/pause_generation", pause_body(mode))
        except BaseException:
            self._pool.paused = False
            self._pool.pause_mode = None
            raise

    def _warn_unless_deterministic(self) -> None:
        """Once: SGLang honours `sampling_seed` only with --enable-deterministic-inference."""
        self._seed_checked = True
        plain = [
            w.url for w in self._pool.workers if not w.info.get("enable_deterministic_inference")
        ]
        if plain:
            log.warning(
                "seeded sampling requested, but SGLang worker(s) %s do not report "
                "--enable-deterministic-inference: sampling_seed has no effect there and runs "
                "will not repeat; relaunch them with --enable-deterministic-inference",
                ", ".join(plain),
            )

    async def flush_cache(self, attempts: int = 10) -> None:
        """Flush every worker's prefix cache; SGLang answers 400 while requests run: retry."""
        await self._ensure_started()
        for url in self._pool.urls:
            for attempt in range(attempts):
                resp = await self._http.request(
                    url, "POST", "/flush_cache", None, self._http.control_s
                )
                if resp.status_code < 400:
                    break
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
            else:
                raise EngineError(f"{url}/flush_cache kept failing: {error_message(resp)}")

    async def health(self) -> bool:
        try:
            return any((await self.worker_health()).values())
        except EngineUnavailable:
            return False

    async def worker_health(self) -> dict[str, bool]:
        """GET /health per worker. A worker that passes but was out of rotation or reports
        another weight version gets the last update replayed before this returns."""
        await self._ensure_started()
        return await self._pool.health()

    async def close(self) -> None:
        for name in list(self._groups):
            await self._drop_group(name)
        await self._http.aclose()
        await self._gen.aclose()

    async def _abort_quietly(self, url: str, wire_rid: str) -> None:
        connect_s = self._http.connect_s
        try:
            if self._pool.router is None:
                await self._http.control(url, "/abort_request", {"rid": wire_rid}, connect_s)
            else:
                body = {"rid": wire_rid}
                await self._pool.broadcast("/abort_request", body, timeout_s=connect_s)
        except EngineError as exc:
            log.warning("could not abort %s on %s: %s", wire_rid, url, exc)


__all__ = [
    "SGLangEngine",
    "StartWeightsMismatch",
    "init_weights_group",
    "parse_generation",
    "rank_workers",
    "route_key_of",
    "sampling_json",
]
