"""LocalEngine: an in-process transformers model that batches concurrent generate() calls.

The CPU default engine, and the engine behind `python -m gspo_agents.serve`. It is not a
high-throughput server: one worker thread owns the model and a left-padded batch with a KV cache;
requests join the running batch at step boundaries (their prompts are prefilled together, and their
cache rows are left-padded and appended) and leave it when they finish, are aborted or cancelled.
The event loop never runs a forward pass. This file is the public API, admission control, pauses,
the timing of weight swaps and the worker loop; the parts live beside it by role:
- `local_runner`: the model side of the worker: the weights in use, prefill and decode forwards,
  the sampling step that says which rows are done, and the checks that build a new model.
- `local_batch`: the running batch, its preallocated KV cache and per-row state; identical
  prompts admitted together (the G samples of a task) are prefilled once.
- `local_sampling`: every row sampled at once from a counter-based per-request seed.
- `local_forward`: a fused forward for plain Qwen3 models (transformers' forward otherwise).
- `local_request`: the request record and how answers cross to the caller's event loop.
- `local_routes`: a MoE model's routed experts for requests that ask (SGLang's
  `return_routed_experts`), for engine-side routing replay.

Numerics: each row gets position ids counting only its real tokens and an attention mask hiding
its padding, so a row in a padded batch sees exactly what an unpadded forward sees; the reported
log-prob is log_softmax(logits / T) of the sampled token in fp32 (`gspo_agents.logprobs` semantics),
before top-k / top-p filtering, which only shapes the sampling distribution.

Reproducibility: a request's token at generated position t depends only on its seed
(`SamplingParams.seed`, else one drawn from the engine's `seed` at submission), t and its logits,
not on which other requests share the batch or in what order.

Weight updates: `update_weights` loads the new checkpoint off the event loop, then the worker
swaps models when no request is running (admissions stop meanwhile), so every token of one
Generation comes from one weight version. Pause first (as the trainer does) to make that
immediate: an "abort" pause ends running requests; an "in_place" / "retract" pause keeps them,
the swap happens under them, and their answers list per-token versions.

Shape legend: B rows in the running batch, L cache length (incl. left padding), V vocabulary.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from gspo_agents.models import load_model
from gspo_agents.rollout.engine import (
    EngineError,
    EngineRequestError,
    FinishReason,
    Generation,
    PauseMode,
    SamplingParams,
    check_pause_mode,
)
from gspo_agents.rollout.local_batch import Batch
from gspo_agents.rollout.local_forward import Qwen3Forward
from gspo_agents.rollout.local_request import (
    Request,
    fail,
    finish_reason,
    post,
    resolve,
    resolve_all,
)
from gspo_agents.rollout.local_runner import (
    ModelRunner,
    check_named_tensors,
    check_same_vocab,
    eos_of,
    model_with_tensors,
    sample_step,
)
from gspo_agents.rollout.local_sampling import SEED_BITS, fold_seed


@dataclass(slots=True)
class EngineStats:
    """Counters for tests and benchmarks (read-only for callers)."""

    requests: int = 0
    forward_steps: int = 0
    max_running: int = 0  # the largest batch a decode step has run
    prefill_rows: int = 0  # prompts prefilled (identical prompts admitted together count once)


@dataclass(slots=True)
class _Swap:
    model: torch.nn.Module
    version: int
    fast_forward: Qwen3Forward | None
    done: threading.Event = field(default_factory=threading.Event)


class LocalEngine:
    """In-process engine (see module docstring). Implements `rollout.engine.Engine`."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "float32",
        max_batch_size: int = 64,
        seed: int = 0,
        stop_on_eos: bool = True,
        weight_version: int = 0,
        num_threads: int | None = 1,
        pause_mode: PauseMode = "abort",
        return_routed_experts: bool = False,
    ) -> None:
        """`num_threads`: torch intra-op threads of the worker thread only (None: torch's
        default). 1 by default: small decode batches gain nothing from more, and on a busy
        machine (the learner training alongside) OpenMP oversubscription made a 2-thread
        worker ~15x slower than a 1-thread one (benchmarked on the tiny model).
        `pause_mode`: the mode the RolloutManager pauses with around a weight update (pause()).

        `return_routed_experts` (SGLang's `--enable-return-routed-experts`): a request may ask
        for its MoE routes (`routed_experts_start_len`); a dense model is refused here."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._trainer_pause_mode = check_pause_mode(pause_mode)
        self.model_path = model_path
        self._dtype = dtype
        model = load_model(model_path, dtype)
        self._runner = ModelRunner(model, Qwen3Forward.for_model(model), return_routed_experts)
        self._eos_ids = eos_of(model) if stop_on_eos else frozenset()
        self._max_batch = max_batch_size
        self._version = weight_version
        self._generator = torch.Generator().manual_seed(seed)
        self.stats = EngineStats()
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._live: dict[str, Request] = {}  # waiting + running, by request id
        self._running = 0
        self._paused = False
        self._pause_mode: str | None = None  # abort | in_place | retract while paused
        self._closed = False
        self._swap: _Swap | None = None
        self._num_threads = num_threads
        self._worker = threading.Thread(target=self._run, name="local-engine", daemon=True)
        self._worker.start()

    # --- public API (event-loop side) ----------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def pause_mode(self) -> PauseMode:
        return self._trainer_pause_mode

    @property
    def context_length(self) -> int:
        return int(self._runner.model.config.max_position_embeddings)

    @property
    def returns_routed_experts(self) -> bool:
        return self._runner.routes is not None

    @property
    def max_batch_size(self) -> int:
        return self._max_batch

    @property
    def vocab_size(self) -> int:
        return int(self._runner.model.config.vocab_size)

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        request_id: str,
        *,
        route_key: str | None = None,
        ignore_eos: bool = False,
        routed_experts_start_len: int | None = None,
    ) -> Generation:
        """Continue `input_ids`; stops at `sampling.stop_token_ids` and, unless `ignore_eos`,
        at the model's eos (SGLang's default). One worker: `route_key` has nothing to choose.
        `routed_experts_start_len` (needs return_routed_experts): also return the routes of
        positions [start, prompt + output - 1), as SGLang does (local_routes.py)."""
        self._check_routes_start(routed_experts_start_len, len(input_ids))
        request = self._submit(list(input_ids), sampling, request_id, ignore_eos)
        request.routes_start = routed_experts_start_len
        try:
            return await request.future
        except asyncio.CancelledError:
            # The caller went away: free the batch slot at the next step boundary.
            self._abort_ids([request_id])
            raise

    async def abort(self, request_id: str | None = None) -> None:
        with self._cond:
            ids = list(self._live) if request_id is None else [request_id]
        self._abort_ids(ids)

    async def pause(self, mode: PauseMode = "abort") -> None:
        """SGLang's pause modes. abort: running requests return 'abort' with their tokens, new
        ones wait. in_place / retract: running requests stay, make no progress, and continue
        after resume() under the weights loaded meanwhile (their answers then list per-token
        versions). Here both keep the KV cache; SGLang's retract recomputes it."""
        check_pause_mode(mode)
        with self._cond:
            self._paused = True
            self._pause_mode = mode
            running = [r.rid for r in self._live.values() if r not in self._waiting]
        if mode == "abort":
            self._abort_ids(running)
            await asyncio.to_thread(self._wait_until_idle)

    async def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._pause_mode = None
            self._cond.notify_all()

    def busy(self) -> bool:
        """Whether SGLang would refuse a cache flush now: requests running, or waiting while not
        paused (0.5.23 scheduler.flush_cache: is_fully_idle(ignore_waiting=paused)); a
        `retract` pause has moved the running ones to the waiting queue."""
        with self._cond:
            running = 0 if self._pause_mode == "retract" else self._running
            return running > 0 or (bool(self._waiting) and not self._paused)

    async def update_weights(self, path: str, version: int) -> None:
        """Load HF weights from `path`; swap when no request runs; tag later tokens `version`."""
        model = await asyncio.to_thread(load_model, path, self._dtype)
        check_same_vocab(model, self._runner.model, path)
        await self._swap_in(model, version)
        self.model_path = path

    async def update_weights_from_tensors(
        self, named_tensors: dict[str, torch.Tensor], version: int
    ) -> None:
        """Replace the named parameters (names of the in-memory model's state_dict), as the
        distributed weight update delivers them; the rest stay as they are."""
        check_named_tensors(self._runner.model, named_tensors)
        model = await asyncio.to_thread(model_with_tensors, self._runner.model, named_tensors)
        await self._swap_in(model, version)

    async def _swap_in(self, model: torch.nn.Module, version: int) -> None:
        fast = await asyncio.to_thread(Qwen3Forward.for_model, model)  # not under the lock
        swap = _Swap(model, version, fast)
        with self._cond:
            if self._closed:
                raise EngineError("LocalEngine is closed")
            self._swap = swap
            self._cond.notify_all()
        await asyncio.to_thread(swap.done.wait)
        if self._version != version:
            raise EngineError("LocalEngine closed before the weight update was applied")

    async def health(self) -> bool:
        return self._worker.is_alive() and not self._closed

    @property
    def paused(self) -> bool:
        return self._paused

    async def close(self) -> None:
        with self._cond:
            self._closed = True
            ids = list(self._live)
        self._abort_ids(ids)
        with self._cond:
            self._cond.notify_all()
        await asyncio.to_thread(self._worker.join)

    # --- submission and control (any thread, under the lock) -----------------------------------

    def request_ids(self) -> list[str]:
        """Ids of the requests waiting or running now."""
        with self._cond:
            return list(self._live)

    def _submit(
        self, input_ids: list[int], sampling: SamplingParams, rid: str, ignore_eos: bool
    ) -> Request:
        self._validate(input_ids, sampling, rid)
        loop = asyncio.get_running_loop()
        with self._cond:  # the engine generator is shared by every caller's thread
            seed = self._draw_seed() if sampling.seed is None else fold_seed(sampling.seed)
        request = Request(
            rid=rid,
            prompt=input_ids,
            sampling=sampling,
            stop_ids=frozenset(sampling.stop_token_ids)
            | (frozenset() if ignore_eos else self._eos_ids),
            loop=loop,
            future=loop.create_future(),
            seed=seed,
            submitted_at=time.perf_counter(),
        )
        with self._cond:
            if self._closed:
                raise EngineError("LocalEngine is closed")
            if rid in self._live:
                raise EngineRequestError(f"request id {rid!r} is already in flight")
            self._live[rid] = request
            self._waiting.append(request)
            self.stats.requests += 1
            self._cond.notify_all()
        return request

    def _check_routes_start(self, start: int | None, prompt: int) -> None:
        if start is None:
            return
        if self._runner.routes is None:
            raise EngineRequestError(
                "routed experts asked of a LocalEngine built without return_routed_experts=True"
            )
        if not 0 <= start <= prompt:  # SGLang 0.5.23 scheduler's rule
            raise EngineRequestError(f"routed_experts_start_len={start} outside [0, {prompt}]")

    def _validate(self, input_ids: list[int], sampling: SamplingParams, rid: str) -> None:
        if not input_ids:
            raise EngineRequestError("input_ids is empty: a generation needs at least one token")
        if min(input_ids) < 0 or max(input_ids) >= self.vocab_size:
            raise EngineRequestError(f"input_ids has ids outside [0, {self.vocab_size})")
        if len(input_ids) + sampling.max_new_tokens > self.context_length:
            raise EngineRequestError(
                f"prompt ({len(input_ids)} tokens) + max_new_tokens ({sampling.max_new_tokens}) "
                f"exceeds the context length {self.context_length}: shrink max_new_tokens"
            )
        if not rid:
            raise EngineRequestError("request_id must be a non-empty string")

    def _abort_ids(self, ids: list[str]) -> None:
        with self._cond:
            for rid in ids:
                request = self._live.get(rid)
                if request is None:
                    continue
                request.aborted = True
                if request in self._waiting:  # never started: answer now, no tokens
                    self._waiting.remove(request)
                    self._finish(request, "abort")
            self._cond.notify_all()

    def _wait_until_idle(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._running == 0 or self._closed)

    def _finish(self, request: Request, reason: FinishReason) -> None:
        """Resolve a request (caller holds the lock)."""
        post(request.loop, resolve, request.future, self._answer(request, reason, None))

    def _answer(self, request: Request, reason: FinishReason, matched: int | None) -> Generation:
        """The request's Generation; it is no longer live (caller holds the lock)."""
        self._live.pop(request.rid, None)
        return request.generation(reason, matched, self._version)

    # --- worker thread -------------------------------------------------------------------------

    def _run(self) -> None:
        """Worker loop. Consumes waiting requests and swaps; produces finished Generations.
        Waits on the condition when there is nothing to run; submissions, aborts, resume, swaps
        and close notify it."""
        if self._num_threads is not None:
            # Intra-op threads for this thread's forwards; tiny batches lose to oversubscription.
            torch.set_num_threads(self._num_threads)
        batch = Batch()

        def has_work() -> bool:
            if self._closed or self._ready():
                return True
            return len(batch) > 0 and (not self._held() or any(r.aborted for r in batch.rows))

        while True:
            with self._cond:
                self._cond.wait_for(has_work)
                if self._closed:
                    self._drain(batch)
                    return
                admitted = self._admit(len(batch))
            try:
                with torch.inference_mode():
                    self._step(batch, admitted)
            except Exception as exc:  # a bug: fail the affected requests, keep serving others
                with self._cond:
                    for request in batch.rows + admitted:
                        self._live.pop(request.rid, None)
                        post(request.loop, fail, request.future, exc)
                    batch = Batch()
                    self._running = 0
                    self._cond.notify_all()

    def _held(self) -> bool:
        """Paused with running requests kept (in_place / retract): the batch does not step."""
        return self._paused and self._pause_mode != "abort"

    def _ready(self) -> bool:
        return self._swap is not None or (bool(self._waiting) and not self._paused)

    def _admit(self, running: int) -> list[Request]:
        if self._swap is not None:
            if running == 0 or self._held():
                self._keep_through_update(self._swap.version)
                self._version = self._swap.version
                self._runner.swap(self._swap.model, self._swap.fast_forward)
                self._swap.done.set()
                self._swap = None
            return []  # no admissions while a swap waits for the batch to drain
        if self._paused:
            return []
        admitted: list[Request] = []
        while self._waiting and running + len(admitted) < self._max_batch:
            request = self._waiting.popleft()
            request.version = self._version
            admitted.append(request)
        self._running = running + len(admitted)
        return admitted

    def _keep_through_update(self, version: int) -> None:
        """Live requests continue under `version`; those with tokens record where the old one
        ended (SGLang 0.5.23 scheduler.record_weight_version_change)."""
        for request in self._live.values():
            if request.tokens and request.version != version:
                request.version_events.append((request.version, len(request.tokens)))
            request.version = version

    def _drain(self, batch: Batch) -> None:
        if self._swap is not None:
            self._swap.done.set()  # update_weights sees the engine closed
        for request in batch.rows:
            if request.rid in self._live:
                self._finish(request, "abort")
        self._running = 0
        self._cond.notify_all()

    def _step(self, batch: Batch, admitted: list[Request]) -> None:
        aborted = [i for i, r in enumerate(batch.rows) if r.aborted]
        if aborted:
            self._retire(batch, aborted, [None] * len(aborted))
        if len(batch) and not self._held():
            self.stats.max_running = max(self.stats.max_running, len(batch))
            self.stats.forward_steps += 1
            self._sample_and_retire(batch, self._runner.decode(batch))
        if admitted:
            self.stats.forward_steps += 1
            new, logits_BV, prompts = self._runner.prefill(admitted)
            self.stats.prefill_rows += prompts
            self._sample_and_retire(new, logits_BV)
            batch.merge(new)

    def _sample_and_retire(self, batch: Batch, logits_BV: torch.Tensor) -> None:
        done, matched = sample_step(batch, logits_BV)
        if done:
            self._retire(batch, done, matched)

    def _retire(self, batch: Batch, done: list[int], matched: list[int | None]) -> None:
        """Answer rows `done` (ascending) and drop them from the batch."""
        answers: dict[asyncio.AbstractEventLoop, list] = {}
        with self._cond:
            for i, match in zip(done, matched, strict=True):
                request = batch.rows[i]
                if request.rid in self._live:
                    generation = self._answer(request, finish_reason(request, match), match)
                    answers.setdefault(request.loop, []).append((request.future, generation))
            self._running -= len(done)
            self._cond.notify_all()
        for loop, pairs in answers.items():  # one wake-up per event loop, not per request
            post(loop, resolve_all, pairs)
        gone = set(done)
        batch.keep([i for i in range(len(batch)) if i not in gone])

    def _draw_seed(self) -> int:
        return int(torch.randint(0, 1 << SEED_BITS, (1,), generator=self._generator))
