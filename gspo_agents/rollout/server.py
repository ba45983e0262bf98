"""The SGLang-compatible HTTP subset, served by a LocalEngine (Starlette app).

Not SGLang: a CPU server for the subset of SGLang's native API the rollout side uses, with
SGLang's request and response JSON shapes (see shared/SGLANG.md), so the SGLangEngine client runs
over real HTTP in tests and a CPU-only user has a server. Endpoints:

  POST /generate                      input_ids (one list, or a list of lists for a batch),
                                      sampling_params, return_logprob, rid; blocks while paused
  GET  /health, /health_generate      200, or 503 once the engine is closed; while generation is
                                      paused it waits for the resume, up to health_check_timeout_s,
                                      then 503 (SGLang's health check generates a token)
  GET  /ready                         200, or 503 while paused
  GET  /get_model_info, /model_info   model_path, weight_version: the CURRENT version
  GET  /get_server_info, /server_info launch arguments: the LAUNCH weight_version (an update does
                                      not change it, as in SGLang), enable_deterministic_inference
  (any)                               X-SMG-Routing-Key: counted per key in server_info stats
  POST /abort_request                 {"rid", "abort_all"}: rid matches by PREFIX, as SGLang does
  POST /pause_generation              {"mode": "abort" | "in_place" | "retract"}: abort makes
                                      in-flight requests return 'abort'; the others keep them
                                      and continue them after /continue_generation
  POST /continue_generation
  POST /update_weights_from_disk      {"model_path", "weight_version", "flush_cache", ...};
                                      400 {"success": false} when the load fails
  POST /init_weights_update_group     {master_address, master_port, rank_offset, world_size,
                                      group_name, backend} (backend gloo here; nccl needs GPUs)
  POST /begin_weight_update, /end_weight_update   the update session (server_updates.py)
  POST /update_weights_from_distributed {names, dtypes, shapes, group_name, weight_version}:
                                      only inside a session
  POST /flush_cache                   400 while requests run (the engine keeps no prefix cache)
Every answer lists meta_info.weight_versions spans, as SGLang 0.5.23 does. The weight-update
rules of 0.5.23 are in server_updates.py.

Differences from SGLang: weight versions must be integer strings (our Engine protocol counts
versions); `retract` keeps the KV cache (SGLang recomputes it); `text` is decoded only when a
tokenizer is present;
seeds are honoured with or without --enable-deterministic-inference (which is only reported).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gspo_agents.rollout.engine import EngineError, EngineRequestError, Generation, SamplingParams
from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.server_lora import LoraHandlers, LoraSettings
from gspo_agents.rollout.server_updates import BadRequest, UpdateHandlers, error_response
from gspo_agents.rollout.sglang_wire import encode_routed_experts

log = logging.getLogger(__name__)

SERVER_VERSION = "gspo-agents-local/0.1"
ROUTING_KEY_HEADER = "x-smg-routing-key"
_MAX_ROUTING_KEYS = 4096  # distinct keys kept in the stats (the oldest are dropped)


def parse_sampling(params: dict[str, Any]) -> tuple[SamplingParams, bool]:
    """SGLang sampling_params → (SamplingParams, ignore_eos). Temperature 0 means greedy, as in
    SGLang (temperature 1, top_k 1)."""
    temperature = float(params.get("temperature", 1.0))
    top_k = int(params.get("top_k", -1))
    if temperature < 1e-6:
        temperature, top_k = 1.0, 1
    seed = params.get("sampling_seed", params.get("seed"))
    try:
        sampling = SamplingParams(
            max_new_tokens=int(params.get("max_new_tokens", 128)),
            temperature=temperature,
            top_p=float(params.get("top_p", 1.0)),
            top_k=top_k,
            stop_token_ids=tuple(int(t) for t in params.get("stop_token_ids") or ()),
            seed=None if seed is None else int(seed),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"bad sampling_params: {exc}") from exc
    return sampling, bool(params.get("ignore_eos", False))


# The engine's version of the boot weights, written "default" on the wire as SGLang 0.5.23 does
# (server_args.weight_version defaults to "default" and stays so until an update names one).
BOOT_VERSION = -1


def wire_version(version: int) -> str:
    return "default" if version == BOOT_VERSION else str(version)


def finish_reason_json(gen: Generation) -> dict[str, Any]:
    if gen.finish_reason == "stop":
        return {"type": "stop", "matched": gen.meta.get("matched")}
    if gen.finish_reason == "length":
        return {"type": "length", "length": len(gen.token_ids)}
    return {"type": "abort", "message": "Abort request"}


def version_spans(gen: Generation) -> list[dict[str, Any]]:
    """meta_info.weight_versions as SGLang 0.5.23 reports it for every finished request: one
    {version, start, end} per run of output tokens made under one weight version (a request a
    retract / in_place pause kept across an update has several; weight_version is the last).
    srt/utils/weight_versions.py: compute_weight_version_spans, add_weight_versions_to_meta_info."""
    spans: list[dict[str, Any]] = []
    for i, version in enumerate(gen.versions()):
        if spans and spans[-1]["version"] == wire_version(version):
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": wire_version(version), "start": i, "end": i + 1})
    return spans or [{"version": wire_version(gen.weight_version), "start": 0, "end": 0}]


class LocalServer:
    """Request handlers over one LocalEngine. Build the app with `build_app`."""

    def __init__(
        self,
        engine: LocalEngine,
        tokenizer=None,
        *,
        deterministic: bool = False,
        health_check_timeout_s: float = 20.0,
        fail_loads: int = 0,
        lora: LoraSettings | None = None,
        die_after_buckets: int = 0,
    ) -> None:
        self.engine = engine
        self.updates = UpdateHandlers(
            engine, fail_loads=fail_loads, die_after_buckets=die_after_buckets
        )
        self.lora = LoraHandlers(engine, lora or LoraSettings(), engine.model_path)
        self.tokenizer = tokenizer
        self.started_at = time.time()
        self.launch_version = engine.weight_version  # what /server_info reports, as SGLang does
        self.deterministic = deterministic
        self.health_check_timeout_s = health_check_timeout_s
        self.routing_keys: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.probes: collections.Counter[str] = collections.Counter()  # GETs of health/model info

    # --- generation ------------------------------------------------------------------------

    async def generate(self, request: Request) -> JSONResponse:
        body = await request.json()
        self._count_routing_key(request.headers.get(ROUTING_KEY_HEADER))
        input_ids = body.get("input_ids")
        if input_ids is None:
            raise BadRequest("send input_ids (token ids); this server does not take text")
        refused = self.lora.check_generate(body)
        if refused is not None:
            return refused
        sampling, ignore_eos = parse_sampling(body.get("sampling_params") or {})
        batched = bool(input_ids) and isinstance(input_ids[0], list)
        prompts = input_ids if batched else [input_ids]
        rids = body.get("rid")
        if rids is None:
            rids = [uuid.uuid4().hex for _ in prompts]
        elif not batched:
            rids = [rids]
        if not isinstance(rids, list) or len(rids) != len(prompts):
            raise BadRequest("rid must be a string, or a list with one rid per input_ids row")
        want_logprobs = bool(body.get("return_logprob", False))
        routes_start = self._routes_asked(body)
        calls = [
            self.engine.generate(
                list(map(int, p)),
                sampling,
                str(r),
                ignore_eos=ignore_eos,
                routed_experts_start_len=routes_start,
            )
            for p, r in zip(prompts, rids, strict=True)
        ]
        gens = await _unless_disconnected(request, asyncio.gather(*calls))
        if gens is None:
            return error_response(
                "client disconnected", 499
            )  # nobody reads this; the work is cancelled
        out = [
            self._generation_json(g, str(r), want_logprobs) for g, r in zip(gens, rids, strict=True)
        ]
        return JSONResponse(out if batched else out[0])

    def _routes_asked(self, body: dict) -> int | None:
        """GenerateReqInput.return_routed_experts / routed_experts_start_len (SGLang 0.5.23)."""
        if not body.get("return_routed_experts"):
            return None
        if not getattr(self.engine, "returns_routed_experts", False):
            raise BadRequest(
                "return_routed_experts needs a server launched with "
                "--enable-return-routed-experts (and a MoE model)"
            )
        return int(body.get("routed_experts_start_len", 0))

    def _count_routing_key(self, key: str | None) -> None:
        if key is None:
            return
        self.routing_keys[key] = self.routing_keys.pop(key, 0) + 1
        while len(self.routing_keys) > _MAX_ROUTING_KEYS:
            self.routing_keys.popitem(last=False)

    def _generation_json(self, gen: Generation, rid: str, want_logprobs: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish_reason_json(gen),
            "prompt_tokens": gen.meta.get("prompt_tokens"),
            "completion_tokens": len(gen.token_ids),
            "cached_tokens": 0,
            "weight_version": wire_version(gen.weight_version),
            "weight_versions": version_spans(gen),
            "e2e_latency": gen.meta.get("e2e_latency"),
        }
        if want_logprobs:
            meta["output_token_logprobs"] = [
                [lp, tok, None] for lp, tok in zip(gen.logprobs, gen.token_ids, strict=True)
            ]
        if gen.routed_experts is not None:
            meta["routed_experts"] = encode_routed_experts(gen.routed_experts)
        text = self.tokenizer.decode(gen.token_ids) if self.tokenizer is not None else ""
        return {"text": text, "output_ids": gen.token_ids, "meta_info": meta}

    # --- status ----------------------------------------------------------------------------

    async def health(self, request: Request) -> JSONResponse:
        self.probes[request.url.path] += 1
        """As SGLang 0.5.23: the check generates a token, so while paused it waits for the
        resume, and answers 503 when none comes within the timeout."""
        deadline = time.monotonic() + self.health_check_timeout_s
        while self.engine.paused:
            if time.monotonic() >= deadline:
                return JSONResponse({}, status_code=503)
            await asyncio.sleep(0.05)
        ok = await self.engine.health()
        return JSONResponse({}, status_code=200 if ok else 503)

    async def ready(self, request: Request) -> JSONResponse:
        ok = not self.engine.paused and await self.engine.health()
        return JSONResponse({}, status_code=200 if ok else 503)

    async def model_info(self, request: Request) -> JSONResponse:
        self.probes[request.url.path] += 1
        return JSONResponse(
            {
                "model_path": self.engine.model_path,
                "tokenizer_path": self.engine.model_path,
                "is_generation": True,
                "weight_version": wire_version(self.engine.weight_version),
                "preferred_sampling_params": None,
            }
        )

    async def server_info(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "version": SERVER_VERSION,
                "engine": "local",
                "model_path": self.engine.model_path,
                "weight_version": wire_version(self.launch_version),  # launch argument, fixed
                "enable_deterministic_inference": self.deterministic,
                "enable_return_routed_experts": bool(
                    getattr(self.engine, "returns_routed_experts", False)
                ),
                **self.lora.settings.info(),
                "context_length": self.engine.context_length,
                "max_running_requests": self.engine.max_batch_size,
                "tp_size": 1,
                "dp_size": 1,
                "uptime_s": time.time() - self.started_at,
                "num_live_requests": len(self.engine.request_ids()),
                "stats": {
                    "requests": self.engine.stats.requests,
                    "forward_steps": self.engine.stats.forward_steps,
                    "max_running": self.engine.stats.max_running,
                    "routing_keys": dict(self.routing_keys),
                    "probes": dict(self.probes),
                    **self.updates.stats,
                    "weight_groups": sorted(self.updates.groups),
                },
            }
        )

    # --- control ---------------------------------------------------------------------------

    async def abort_request(self, request: Request) -> JSONResponse:
        body = await _json_or_empty(request)
        if body.get("abort_all"):
            await self.engine.abort(None)
            return JSONResponse({"success": True})
        prefix = str(body.get("rid") or "")
        if not prefix:
            raise BadRequest('send {"rid": ...} or {"abort_all": true}')
        for rid in self.engine.request_ids():
            if rid.startswith(prefix):  # SGLang matches by prefix
                await self.engine.abort(rid)
        return JSONResponse({"success": True})

    async def pause(self, request: Request) -> JSONResponse:
        mode = (await _json_or_empty(request)).get("mode", "abort")
        if mode not in ("abort", "in_place", "retract"):
            raise BadRequest(f"pause mode {mode!r} is not one of abort, in_place, retract")
        await self.engine.pause(mode)
        return JSONResponse({"success": True})

    async def resume(self, request: Request) -> JSONResponse:
        await self.engine.resume()
        return JSONResponse({"success": True})


async def _json_or_empty(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    import json

    return json.loads(raw)


async def _unless_disconnected(request: Request, work):
    """Run `work`; if the client hangs up first, cancel it (the engine frees the slots), as
    SGLang aborts a request whose connection closed."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        return None
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _handle(fn):
    async def endpoint(request: Request):
        try:
            return await fn(request)
        except BadRequest as exc:
            return error_response(str(exc))
        except EngineRequestError as exc:
            return error_response(str(exc))
        except EngineError as exc:
            return error_response(str(exc), 503)
        except (ValueError, KeyError, TypeError) as exc:  # malformed JSON or fields
            return error_response(f"bad request: {type(exc).__name__}: {exc}")

    return endpoint


def build_app(
    engine: LocalEngine,
    tokenizer=None,
    *,
    deterministic: bool = False,
    health_check_timeout_s: float = 20.0,
    fail_loads: int = 0,
    lora: LoraSettings | None = None,
    die_after_buckets: int = 0,
) -> Starlette:
    server = LocalServer(
        engine,
        tokenizer,
        deterministic=deterministic,
        health_check_timeout_s=health_check_timeout_s,
        fail_loads=fail_loads,
        lora=lora,
        die_after_buckets=die_after_buckets,
    )
    updates = server.updates
    get, post = ["GET"], ["POST"]
    routes = [
        Route("/generate", _handle(server.generate), methods=post),
        Route("/health", _handle(server.health), methods=get),
        Route("/health_generate", _handle(server.health), methods=get),
        Route("/ready", _handle(server.ready), methods=get),
        Route("/get_model_info", _handle(server.model_info), methods=get),
        Route("/model_info", _handle(server.model_info), methods=get),  # newer SGLang name
        Route("/get_server_info", _handle(server.server_info), methods=get),
        Route("/server_info", _handle(server.server_info), methods=get),
        Route("/abort_request", _handle(server.abort_request), methods=post),
        Route("/pause_generation", _handle(server.pause), methods=post),
        Route("/continue_generation", _handle(server.resume), methods=post),
        Route("/update_weights_from_disk", _handle(updates.update_from_disk), methods=post),
        Route("/init_weights_update_group", _handle(updates.init_group), methods=post),
        Route("/destroy_weights_update_group", _handle(updates.destroy_group), methods=post),
        Route("/begin_weight_update", _handle(updates.begin), methods=post),
        Route("/end_weight_update", _handle(updates.end), methods=post),
        Route(
            "/update_weights_from_distributed",
            _handle(updates.update_from_distributed),
            methods=post,
        ),
        Route("/flush_cache", _handle(updates.flush_cache), methods=get + post),
        Route("/load_lora_adapter", _handle(server.lora.load), methods=post),
        Route("/unload_lora_adapter", _handle(server.lora.unload), methods=post),
        Route("/update_weight_version", _handle(server.lora.update_weight_version), methods=post),
    ]
    app = Starlette(routes=routes)
    app.state.server = server
    return app
