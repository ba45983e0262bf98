"""LocalEngine: an in-process transformers model that batches concurrent generate() calls.

The CPU default engine, and the engine behind `python -m gspo_agents.serve`. It is not a
high-throughput server: one worker thread owns the model and a left-padded batch with a KV cache;
requests join the running batch at step boundaries (their prompts are prefilled together, and their
cache rows are left-padded and appended) and leave it when they finish, are aborted or cancelled.
The event loop never runs a forward pass.

Numerics: each row gets position ids counting only its real tokens and an attention mask hiding
its padding, so a row in a padded batch sees exactly what an unpadded forward sees; the reported
log-prob is log_softmax(logits / T) of the sampled token in fp32 (`gspo_agents.logprobs` semantics),
before top-k / top-p filtering, which only shapes the sampling distribution.

Weight updates: `update_weights` loads the new checkpoint off the event loop, then the worker
swaps models when no request is running (admissions stop meanwhile), so every token of one
Generation comes from one weight version. Pause first (as the trainer does) to make that immediate.

Shape legend: B rows in the running batch, L cache length (incl. left padding), V vocabulary.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
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
    SamplingParams,
)


@dataclass(slots=True)
class EngineStats:
    """Counters for tests and benchmarks (read-only for callers)."""

    requests: int = 0
    forward_steps: int = 0
    max_running: int = 0  # the largest batch a decode step has run


@dataclass(slots=True, eq=False)
class _Request:
    rid: str
    prompt: list[int]
    sampling: SamplingParams
    stop_ids: frozenset[int]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    generator: torch.Generator | None
    submitted_at: float
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    aborted: bool = False  # set by any thread under the engine lock; read by the worker
    version: int = 0


@dataclass(slots=True)
class _Swap:
    model: torch.nn.Module
    version: int
    done: threading.Event = field(default_factory=threading.Event)


class _Batch:
    """The worker's running batch: requests, their KV cache, attention mask and next inputs."""

    def __init__(self) -> None:
        self.rows: list[_Request] = []
        self.cache = None  # transformers DynamicCache over len(rows) rows
        self.mask_BL = torch.zeros(0, 0, dtype=torch.long)
        self.next_pos_B = torch.zeros(0, dtype=torch.long)  # position of next_tok_B
        self.next_tok_B = torch.zeros(0, dtype=torch.long)  # sampled, not yet in the cache

    def __len__(self) -> int:
        return len(self.rows)


def _layers(cache) -> list:
    layers = cache.layers
    for layer in layers:
        if getattr(layer, "is_sliding", False):
            raise EngineError("LocalEngine does not support sliding-window attention caches")
    return layers


def _left_pad(t: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    missing = length - t.shape[dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _merge(batch: _Batch, new: _Batch) -> None:
    """Append `new`'s rows to `batch`, left-padding the shorter cache (zeros, masked out)."""
    if not new.rows:
        return
    if not batch.rows:
        batch.rows, batch.cache, batch.mask_BL = new.rows, new.cache, new.mask_BL
        batch.next_pos_B, batch.next_tok_B = new.next_pos_B, new.next_tok_B
        return
    length = max(batch.mask_BL.shape[1], new.mask_BL.shape[1])
    for old_layer, new_layer in zip(_layers(batch.cache), _layers(new.cache), strict=True):
        old_layer.keys = torch.cat(
            [_left_pad(old_layer.keys, length, 2), _left_pad(new_layer.keys, length, 2)]
        )
        old_layer.values = torch.cat(
            [_left_pad(old_layer.values, length, 2), _left_pad(new_layer.values, length, 2)]
        )
    batch.mask_BL = torch.cat(
        [_left_pad(batch.mask_BL, length, 1), _left_pad(new.mask_BL, length, 1)]
    )
    batch.rows = batch.rows + new.rows
    batch.next_pos_B = torch.cat([batch.next_pos_B, new.next_pos_B])
    batch.next_tok_B = torch.cat([batch.next_tok_B, new.next_tok_B])


def _keep(batch: _Batch, keep: list[int]) -> None:
    """Keep only rows `keep`, then drop cache columns that are padding in every remaining row."""
    if len(keep) == len(batch.rows):
        return
    if not keep:
        batch.__init__()
        return
    idx = torch.tensor(keep, dtype=torch.long)
    batch.rows = [batch.rows[i] for i in keep]
    batch.mask_BL = batch.mask_BL[idx]
    batch.next_pos_B, batch.next_tok_B = batch.next_pos_B[idx], batch.next_tok_B[idx]
    start = int((batch.mask_BL.sum(0) == 0).long().cumprod(0).sum())  # all-padding prefix
    batch.mask_BL = batch.mask_BL[:, start:]
    for layer in _layers(batch.cache):
        layer.keys = layer.keys[idx, :, start:]
        layer.values = layer.values[idx, :, start:]


def _filter_top_k_top_p(scaled_V: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k > 0 and top_k < scaled_V.shape[-1]:
        kth = torch.topk(scaled_V, top_k).values[-1]
        scaled_V = scaled_V.masked_fill(scaled_V < kth, float("-inf"))
    if top_p < 1.0:
        sorted_V, order = torch.sort(scaled_V, descending=True)
        probs = torch.softmax(sorted_V, dim=-1)
        drop = probs.cumsum(-1) - probs > top_p  # keeps the token that crosses top_p
        scaled_V = scaled_V.masked_fill(
            torch.zeros_like(drop).scatter(0, order, drop), float("-inf")
        )
    return scaled_V


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
    ) -> None:
        """`num_threads`: torch intra-op threads of the worker thread only (None: torch's
        default). 1 by default: small decode batches gain nothing from more, and on a busy
        machine (the learner training alongside) OpenMP oversubscription made a 2-thread
        worker ~15x slower than a 1-thread one (benchmarked on the tiny model)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model_path = model_path
        self._dtype = dtype
        self._model = load_model(model_path, dtype)
        self._cache_kwarg = self._detect_cache_kwarg(self._model)
        self._eos_ids = self._eos_of(self._model) if stop_on_eos else frozenset()
        self._max_batch = max_batch_size
        self._version = weight_version
        self._generator = torch.Generator().manual_seed(seed)
        self.stats = EngineStats()
        self._cond = threading.Condition()
        self._waiting: deque[_Request] = deque()
        self._live: dict[str, _Request] = {}  # waiting + running, by request id
        self._running = 0
        self._paused = False
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
    def context_length(self) -> int:
        return int(self._model.config.max_position_embeddings)

    @property
    def max_batch_size(self) -> int:
        return self._max_batch

    @property
    def vocab_size(self) -> int:
        return int(self._model.config.vocab_size)

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        request_id: str,
        *,
        ignore_eos: bool = False,
    ) -> Generation:
        """Continue `input_ids`; stops at `sampling.stop_token_ids` and, unless `ignore_eos`,
        at the model's eos (SGLang's default)."""
        request = self._submit(list(input_ids), sampling, request_id, ignore_eos)
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

    async def pause(self) -> None:
        """Abort running requests (they return 'abort' with their tokens) and hold new ones."""
        with self._cond:
            self._paused = True
            running = [r.rid for r in self._live.values() if r not in self._waiting]
        self._abort_ids(running)
        await asyncio.to_thread(self._wait_until_idle)

    async def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    async def update_weights(self, path: str, version: int) -> None:
        """Load HF weights from `path`; swap when no request runs; tag later tokens `version`."""
        model = await asyncio.to_thread(load_model, path, self._dtype)
        if model.config.vocab_size != self._model.config.vocab_size:
            raise EngineRequestError(
                f"checkpoint {path!r} has vocab_size {model.config.vocab_size}, the engine's model "
                f"has {self._model.config.vocab_size}: update_weights needs the same architecture"
            )
        await self._swap_in(model, version)
        self.model_path = path

    async def update_weights_from_tensors(
        self, named_tensors: dict[str, torch.Tensor], version: int
    ) -> None:
        """Replace the named parameters (names of the in-memory model's state_dict), as the
        distributed weight update delivers them; the rest stay as they are."""
        own = self._model.state_dict()
        unknown = sorted(set(named_tensors) - set(own))
        if unknown:
            raise EngineRequestError(
                f"unknown parameter names {unknown[:5]} (of {len(unknown)}); send the names of "
                "the model's state_dict"
            )
        for name, tensor in named_tensors.items():
            if tuple(tensor.shape) != tuple(own[name].shape):
                raise EngineRequestError(
                    f"{name}: shape {tuple(tensor.shape)} != model's {tuple(own[name].shape)}"
                )

        def build() -> torch.nn.Module:
            model = copy.deepcopy(self._model)
            model.load_state_dict(named_tensors, strict=False)
            return model

        await self._swap_in(await asyncio.to_thread(build), version)

    async def _swap_in(self, model: torch.nn.Module, version: int) -> None:
        swap = _Swap(model, version)
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
    ) -> _Request:
        self._validate(input_ids, sampling, rid)
        loop = asyncio.get_running_loop()
        gen = None if sampling.seed is None else torch.Generator().manual_seed(sampling.seed)
        request = _Request(
            rid=rid,
            prompt=input_ids,
            sampling=sampling,
            stop_ids=frozenset(sampling.stop_token_ids)
            | (frozenset() if ignore_eos else self._eos_ids),
            loop=loop,
            future=loop.create_future(),
            generator=gen,
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

    def _finish(self, request: _Request, reason: FinishReason, matched: int | None = None) -> None:
        """Resolve a request (caller holds the lock)."""
        self._live.pop(request.rid, None)
        generation = Generation(
            token_ids=request.tokens,
            logprobs=request.logprobs,
            finish_reason=reason,
            weight_version=request.version if request.tokens else self._version,
            meta={
                "prompt_tokens": len(request.prompt),
                "completion_tokens": len(request.tokens),
                "cached_tokens": 0,
                "matched": matched,
                "e2e_latency": time.perf_counter() - request.submitted_at,
            },
        )
        _post(request.loop, _resolve, request.future, generation)

    # --- worker thread -------------------------------------------------------------------------

    def _run(self) -> None:
        """Worker loop. Consumes waiting requests and swaps; produces finished Generations.
        Waits on the condition when there is nothing to run; submissions, aborts, resume, swaps
        and close notify it."""
        if self._num_threads is not None:
            # Intra-op threads for this thread's forwards; tiny batches lose to oversubscription.
            torch.set_num_threads(self._num_threads)
        batch = _Batch()
        while True:
            with self._cond:
                self._cond.wait_for(lambda b=batch: self._closed or len(b) or self._ready())
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
                        _post(request.loop, _fail, request.future, exc)
                    batch = _Batch()
                    self._running = 0
                    self._cond.notify_all()

    def _ready(self) -> bool:
        return self._swap is not None or (bool(self._waiting) and not self._paused)

    def _admit(self, running: int) -> list[_Request]:
        if self._swap is not None:
            if running == 0:
                self._model, self._version = self._swap.model, self._swap.version
                self._cache_kwarg = self._detect_cache_kwarg(self._model)
                self._swap.done.set()
                self._swap = None
            return []  # no admissions while a swap waits for the batch to drain
        if self._paused:
            return []
        admitted = []
        while self._waiting and running + len(admitted) < self._max_batch:
            request = self._waiting.popleft()
            request.version = self._version
            admitted.append(request)
        self._running = running + len(admitted)
        return admitted

    def _drain(self, batch: _Batch) -> None:
        if self._swap is not None:
            self._swap.done.set()  # update_weights sees the engine closed
        for request in batch.rows:
            if request.rid in self._live:
                self._finish(request, "abort")
        self._running = 0
        self._cond.notify_all()

    def _step(self, batch: _Batch, admitted: list[_Request]) -> None:
        self._retire(batch, [r.aborted for r in batch.rows], [None] * len(batch))
        if len(batch):
            self.stats.max_running = max(self.stats.max_running, len(batch))
            self.stats.forward_steps += 1
            self._decode(batch)
        if admitted:
            self.stats.forward_steps += 1
            _merge(batch, self._prefill(admitted))

    def _forward(self, input_ids, mask_BL, positions, cache):
        kwargs = {self._cache_kwarg: cache}
        out = self._model(
            input_ids=input_ids,
            attention_mask=mask_BL,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        return out.logits[:, -1]

    def _prefill(self, requests: list[_Request]) -> _Batch:
        from transformers import DynamicCache

        length = max(len(r.prompt) for r in requests)
        ids = torch.zeros(len(requests), length, dtype=torch.long)
        mask = torch.zeros(len(requests), length, dtype=torch.long)
        for i, r in enumerate(requests):
            ids[i, length - len(r.prompt) :] = torch.tensor(r.prompt)
            mask[i, length - len(r.prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        new = _Batch()
        new.rows, new.mask_BL = list(requests), mask
        new.cache = DynamicCache(config=self._model.config)
        logits_BV = self._forward(ids, mask, positions, new.cache)
        new.next_pos_B = mask.sum(-1)
        self._sample_and_retire(new, logits_BV)
        return new

    def _decode(self, batch: _Batch) -> None:
        mask = torch.cat([batch.mask_BL, torch.ones(len(batch), 1, dtype=torch.long)], dim=1)
        logits_BV = self._forward(
            batch.next_tok_B[:, None], mask, batch.next_pos_B[:, None], batch.cache
        )
        batch.mask_BL = mask
        batch.next_pos_B = batch.next_pos_B + 1
        self._sample_and_retire(batch, logits_BV)

    def _sample_and_retire(self, batch: _Batch, logits_BV: torch.Tensor) -> None:
        tokens, done, matched = [], [], []
        for i, request in enumerate(batch.rows):
            token, logprob = self._sample(logits_BV[i], request)
            request.tokens.append(token)
            request.logprobs.append(logprob)
            tokens.append(token)
            stop = token in request.stop_ids
            done.append(stop or len(request.tokens) >= request.sampling.max_new_tokens)
            matched.append(token if stop else None)
        batch.next_tok_B = torch.tensor(tokens, dtype=torch.long)
        self._retire(batch, done, matched)

    def _retire(self, batch: _Batch, done: list[bool], matched: list[int | None]) -> None:
        if not any(done):
            return
        keep = []
        with self._cond:
            for i, request in enumerate(batch.rows):
                if not done[i]:
                    keep.append(i)
                elif request.rid in self._live:
                    self._finish(request, _reason(request, matched[i]), matched[i])
            self._running -= len(batch) - len(keep)
            self._cond.notify_all()
        _keep(batch, keep)

    def _sample(self, logits_V: torch.Tensor, request: _Request) -> tuple[int, float]:
        params = request.sampling
        scaled_V = logits_V.float()
        if params.temperature != 1.0:
            scaled_V = scaled_V / params.temperature
        logprobs_V = scaled_V - torch.logsumexp(scaled_V, dim=-1)
        if not params.full_support:
            scaled_V = _filter_top_k_top_p(scaled_V, params.top_k, params.top_p)
        probs_V = torch.softmax(scaled_V, dim=-1)
        token = int(torch.multinomial(probs_V, 1, generator=request.generator or self._generator))
        return token, float(logprobs_V[token])

    @staticmethod
    def _detect_cache_kwarg(model) -> str:
        # transformers 5.x renamed `past_key_values` to `cache`; accept either.
        params = inspect.signature(model.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    @staticmethod
    def _eos_of(model) -> frozenset[int]:
        eos = model.config.eos_token_id
        if eos is None:
            return frozenset()
        return frozenset(eos if isinstance(eos, list) else [eos])


def _reason(request: _Request, matched: int | None) -> FinishReason:
    if matched is not None:
        return "stop"
    if len(request.tokens) >= request.sampling.max_new_tokens:
        return "length"
    assert request.aborted, "a row retires only when stopped, at its length, or aborted"
    return "abort"


def _post(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the caller's event loop is closed: nobody is waiting any more
        pass


def _resolve(future: asyncio.Future, generation: Generation) -> None:
    if not future.done():  # a cancelled caller has already gone
        future.set_result(generation)


def _fail(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
