"""SGLang's native HTTP wire format: sampling params out, /generate answers in, error bodies.

Pure functions over JSON; tolerant of the response-shape drift within SGLang 0.5.x
(see shared/SGLANG.md). The client logic lives in sglang_engine.py.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

try:  # 3-5x faster than json on a /generate answer; optional
    import orjson
except ImportError:  # pragma: no cover - a platform without its wheel
    orjson = None  # type: ignore[assignment]  # the json fallback below

import httpx
import torch

from gspo_agents.rollout.engine import (
    EngineError,
    EngineRequestError,
    FinishReason,
    Generation,
    SamplingParams,
    check_pause_mode,
)


def sampling_json(sampling: SamplingParams) -> dict[str, Any]:
    """Explicit sampling params: server defaults come from the model's generation_config."""
    params: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "stop_token_ids": list(sampling.stop_token_ids),
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if sampling.seed is not None:
        params["sampling_seed"] = sampling.seed
    return params


def parse_version(raw: Any, fallback: int) -> int:
    if type(raw) is int:
        return raw
    if raw == "default":  # SGLang's launch value (server_args.weight_version)
        return fallback
    try:
        return int(raw)
    except (TypeError, ValueError):
        return fallback  # another name: no number we know


def parse_generation(
    body: Any,
    fallback_version: int,
    max_new_tokens: int,
    routes: tuple[int, int] | None = None,
    boot_version: int | None = None,
) -> Generation:
    """A /generate response → Generation, tolerating the shape drift of SGLang 0.5.x.
    `routes`: (prompt length, routed_experts_start_len) when routed experts were asked for.
    `boot_version`: the version of a span named "default" (SGLang's launch value,
    server_args.weight_version), which is the worker's boot weights, not the last span's
    version; None: `fallback_version`.

    An abort without routed experts (0.5.23 returns none for a request a pause aborted while it
    waited in the queue) keeps no tokens: their routes are unknown, so the caller sends the
    same request again, as it does after any abort."""
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise EngineError(f"/generate answered without meta_info: {str(body)[:200]}")
    meta = body["meta_info"]
    pairs = meta.get("output_token_logprobs")
    if pairs is None:
        raise EngineError("/generate answered without output_token_logprobs (return_logprob)")
    tokens, logprobs = _token_columns(pairs)
    raw = meta.get("finish_reason")
    kind = raw.get("type") if isinstance(raw, dict) else raw
    reason: FinishReason
    if kind in ("stop", "length", "abort"):
        reason = kind
    else:  # None: some builds omit it on abort
        reason = "length" if len(tokens) >= max_new_tokens else "abort"
    version = parse_version(meta.get("weight_version"), fallback_version)
    routed = None
    if routes is not None and reason == "abort" and not isinstance(meta.get("routed_experts"), str):
        tokens, logprobs, pairs = [], [], []
    elif routes is not None:
        prompt, start = routes
        routed = parse_routed_experts(meta.get("routed_experts"), prompt + len(tokens) - 1 - start)
    return Generation(
        token_ids=tokens,
        logprobs=logprobs,
        finish_reason=reason,
        weight_version=version,
        token_versions=token_versions(
            meta.get("weight_versions") if pairs else None,
            len(tokens),
            fallback_version if boot_version is None else boot_version,
        ),
        routed_experts=routed,
        meta={
            "prompt_tokens": meta.get("prompt_tokens"),
            "cached_tokens": meta.get("cached_tokens", 0),
            "e2e_latency": meta.get("e2e_latency"),
            "matched": raw.get("matched") if isinstance(raw, dict) else None,
            "abort_message": raw.get("message") if isinstance(raw, dict) else None,
        },
    )


def _token_columns(pairs: Any) -> tuple[list[int], list[float]]:
    """`output_token_logprobs` ([logprob, token id, text] per token) -> (ids, log-probs)."""
    try:
        return [int(p[1]) for p in pairs], [float(p[0]) for p in pairs]
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise EngineError(
            f"malformed meta_info.output_token_logprobs {str(pairs)[:200]}: {exc!r}"
        ) from None


def parse_routed_experts(raw: Any, positions: int) -> torch.Tensor | None:
    """`meta_info.routed_experts`: base64 of int32 [positions, layers, top_k] (SGLang 0.5.23
    detokenizer; positions [routed_experts_start_len, prompt + output - 1)) → int32
    [positions, layers*top_k]. Layers x top_k is what the byte count leaves per position."""
    if positions <= 0:
        return None
    if not isinstance(raw, str):
        raise EngineError(
            "/generate answered without meta_info.routed_experts although return_routed_experts "
            "was asked (launch SGLang with --enable-return-routed-experts, and serve a MoE model)"
        )
    try:
        flat = torch.frombuffer(bytearray(base64.b64decode(raw)), dtype=torch.int32)
    except (ValueError, binascii.Error) as exc:
        raise EngineError(f"malformed meta_info.routed_experts: {exc}") from exc
    if flat.numel() == 0 or flat.numel() % positions:
        raise EngineError(
            f"meta_info.routed_experts holds {flat.numel()} ids, not a whole number per each of "
            f"the {positions} positions asked for"
        )
    return flat.reshape(positions, -1)


def encode_routed_experts(routes: torch.Tensor) -> str:
    """The inverse, as SGLang's detokenizer writes it (for our served engine)."""
    return base64.b64encode(routes.to(torch.int32).contiguous().numpy().tobytes()).decode()


def token_versions(spans: Any, num_tokens: int, boot_version: int) -> list[int] | None:
    """Per-token weight versions from `meta_info.weight_versions`, or None when absent (then
    every token has `weight_version`). A span whose version is no number ("default", SGLang's
    launch value) ran on the boot weights: `boot_version`.

    SGLang 0.5.23 lists [{version, start, end}] output-token ranges, one per weight version a
    request ran under (`srt/utils/weight_versions.py`: compute_weight_version_spans in the
    scheduler, add_weight_versions_to_meta_info in the tokenizer manager); a request that a
    `retract` / `in_place` pause kept across an update has two or more, and `weight_version` is
    only the last one. Spans that do not tile [0, num_tokens) are a server bug: EngineError."""
    if not spans:
        return None
    out: list[int] = []
    try:
        for span in spans:
            start, end = int(span["start"]), int(span["end"])
            if start != len(out) or end < start:
                raise ValueError(f"span {span} does not start at token {len(out)}")
            out += [parse_version(span["version"], boot_version)] * (end - start)
    except (KeyError, TypeError, ValueError) as exc:
        raise EngineError(
            f"malformed meta_info.weight_versions {str(spans)[:200]}: {exc}"
        ) from None
    if len(out) != num_tokens:
        raise EngineError(
            f"meta_info.weight_versions covers {len(out)} tokens, the answer has {num_tokens}"
        )
    return out


# SGLang's /pause_generation modes (io_struct.PauseGenerationReqInput, 0.5.23; PauseMode in
# engine.py): "abort" ends in-flight requests (they answer with their tokens so far); "retract"
# and "in_place" keep them on the server and continue them after /continue_generation (retract
# recomputes their KV cache).

# Launch sglang_router (0.3.x) with these so its health checks leave paused workers alone. Its
# default probe, GET /health, makes an SGLang 0.5.23 worker generate one token
# (http_server.py health_generate; SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION, default on), which
# a paused worker cannot: after HEALTH_CHECK_TIMEOUT (SGLANG_HEALTH_CHECK_TIMEOUT, 20 s) it
# answers 503, and a weight update longer than the router's failure threshold gets a healthy
# worker marked down. /model_info answers while paused (it is served by the tokenizer manager,
# which SGLang kills with the rest of the server when a scheduler dies).
ROUTER_HEALTH_ARGS: tuple[str, ...] = ("--health-check-endpoint", "/model_info")

# Header sglang_router (0.3.x) reads the sticky-routing key from (its `--policy manual`).
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"


def routes_enabled(server_info: dict[str, Any]) -> bool | None:
    """The worker's `enable_return_routed_experts` launch flag (top level, or inside a nested
    argument group as ServerArgs.resolved_dict may expand it); None when it reports none."""
    key = "enable_return_routed_experts"
    if key in server_info:
        return bool(server_info[key])
    for value in server_info.values():
        if isinstance(value, dict) and key in value:
            return bool(value[key])
    return None


def generate_body(
    input_ids: list[int],
    sampling: SamplingParams,
    rid: str,
    routes_start: int | None = None,
    lora_name: str | None = None,
) -> dict[str, Any]:
    """POST /generate: token ids in, sampled ids and their log-probs (output only) out; with
    `routes_start`, the MoE routed experts of positions [routes_start, seqlen - 1) too
    (GenerateReqInput.return_routed_experts / routed_experts_start_len, SGLang 0.5.23); with
    `lora_name`, the loaded LoRA adapter to generate with. The engine sends the same body
    encoded incrementally (sglang_body.EncodedPrefixes over `generate_rest`)."""
    return {"input_ids": list(input_ids), **generate_rest(sampling, rid, routes_start, lora_name)}


def generate_rest(
    sampling: SamplingParams,
    rid: str,
    routes_start: int | None = None,
    lora_name: str | None = None,
) -> dict[str, Any]:
    """`generate_body` without its `input_ids`."""
    body: dict[str, Any] = {
        "sampling_params": sampling_json(sampling),
        "return_logprob": True,
        "logprob_start_len": -1,
        "stream": False,
    }
    if routes_start is not None:
        body.update(return_routed_experts=True, routed_experts_start_len=routes_start)
    if lora_name is not None:  # a loaded adapter's name (GenerateReqInput.lora_path)
        body["lora_path"] = lora_name
    body["rid"] = rid  # last: the engine splices each request's rid into cached bytes
    return body


def pause_body(mode: str) -> dict[str, Any]:
    return {"mode": check_pause_mode(mode)}


def init_group_body(
    master_address: str,
    master_port: int,
    rank_offset: int,
    world_size: int,
    group_name: str,
    backend: str,
) -> dict[str, Any]:
    return {
        "master_address": master_address,
        "master_port": master_port,
        "rank_offset": rank_offset,
        "world_size": world_size,
        "group_name": group_name,
        "backend": backend,
    }


def distributed_update_body(
    names: list[str],
    dtypes: list[str],
    shapes: list[list[int]],
    group_name: str,
    version: int | None,
    flush_cache: bool,
) -> dict[str, Any]:
    """One bucket of an NCCL update. `version` None leaves the worker's version as it is (SGLang
    records a version change only for a non-null weight_version): only the last bucket names it,
    so a worker that fails half-way still reports the old version."""
    return {
        "names": names,
        "dtypes": dtypes,
        "shapes": shapes,
        "group_name": group_name,
        "flush_cache": flush_cache,
        "weight_version": None if version is None else str(version),
    }


def disk_update_body(path: str, version: int, flush_cache: bool = True) -> dict[str, Any]:
    return {
        "model_path": path,
        "load_format": None,
        "abort_all_requests": False,
        "weight_version": str(version),
        "flush_cache": flush_cache,
    }


def flush_allowed(pause_mode: str | None) -> bool:
    """Whether an update may ask for `flush_cache: true`. SGLang 0.5.23 flushes only when the
    scheduler is idle, ignoring the waiting queue while paused (scheduler.py: flush_cache,
    is_fully_idle(ignore_waiting=self._engine_paused)); otherwise the update call itself answers
    failure, after the weights changed (scheduler_components/weight_updater.py:
    flush_cache_after_weight_update). An `in_place` pause keeps requests in the running batch,
    so the flush would fail; `abort` ends them and `retract` moves them to the waiting queue."""
    return pause_mode != "in_place"


# SGLang 0.5.23 gates tensor updates behind a weight-update session
# (srt/managers/scheduler_components/weight_updater.py: SchedulerWeightUpdaterManager.
# update_weights_from_distributed answers success=false without receiving anything unless
# begin_weight_update opened one; end_weight_update closes it, and a second begin while one is
# open fails). Endpoints in srt/entrypoints/http_server.py; bodies io_struct.BeginWeightUpdateReqInput
# (selector, default "all") and EndWeightUpdateReqInput (no fields).
BEGIN_UPDATE = "/begin_weight_update"
END_UPDATE = "/end_weight_update"


def json_body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise EngineError(f"non-JSON answer from {resp.request.url}: {resp.text[:200]}") from exc


def loads(raw: bytes) -> Any:
    """json.loads, by orjson where it is installed; json takes what orjson refuses (NaN,
    Infinity) and raises the same ValueError on what neither reads."""
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def json_bytes(where: str, raw: bytes) -> Any:
    """A JSON answer's body (bytes) -> its value; EngineError naming `where` if it is not JSON."""
    try:
        return loads(raw)
    except ValueError as exc:
        text = raw[:200].decode(errors="replace")
        raise EngineError(f"non-JSON answer from {where}: {text}") from exc


def error_text(raw: bytes) -> str:
    """The message of an error answer's body (bytes)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:300].decode(errors="replace")
    return _message_of(body)


def error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:300]
    return _message_of(body)


def _message_of(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if key in body:
                return str(body[key])
    return str(body)[:300]


def check_success(url: str, path: str, resp: httpx.Response) -> None:
    if 400 <= resp.status_code < 500:
        raise EngineRequestError(f"{url}{path} rejected: {error_message(resp)}")
    if resp.status_code >= 500:
        raise EngineError(f"{url}{path} failed: HTTP {resp.status_code}: {error_message(resp)}")
    body = json_body(resp) if resp.content else {}
    if isinstance(body, dict) and body.get("success") is False:
        raise EngineRequestError(f"{url}{path} reported failure: {error_message(resp)}")
