"""The weight-update endpoints of `python -m gspo_agents.serve`, with SGLang 0.5.23's rules.

Rules taken from SGLang 0.5.23 (python/sglang/srt/), so that the client meets them here first:
- Update sessions (managers/scheduler_components/weight_updater.py, SchedulerWeightUpdaterManager):
  /update_weights_from_distributed outside a session opened by /begin_weight_update answers
  400 success=false and receives nothing (so the sender blocks); a second begin while one is
  open, or an end with none open, answers 400. Endpoints: entrypoints/http_server.py.
- A failed disk load answers 400 {"success": false} (http_server.py update_weights_from_disk).
- `weight_version` null leaves the version as it is (scheduler.record_weight_version_change).
- `flush_cache: true` while requests run fails the call, after the weights changed
  (weight_updater.py flush_cache_after_weight_update; scheduler.flush_cache), and so does
  POST /flush_cache (400).
Fault injection for tests: `fail_loads` makes the next N weight loads fail as a bad checkpoint
would. Not here: generation, status and the app (server.py).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import torch
from starlette.requests import Request
from starlette.responses import JSONResponse

from gspo_agents.rollout.engine import EngineRequestError
from gspo_agents.rollout.local_engine import LocalEngine

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# SGLang 0.5.23's words (weight_updater.py), so a client sees the same message here as there.
NOT_FLUSHED = (
    "Weights were updated, but the cache was not flushed because requests are still running or "
    "queued. Retract or finish them, then call /flush_cache."
)


class BadRequest(Exception):
    """A request the server cannot serve; answered with HTTP 400 and this message."""


def error_response(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "code": status}, "success": False, "message": message},
        status_code=status,
    )


def parse_version(raw: Any, current: int) -> int:
    """The version an update sets: null keeps the current one (SGLang records no change)."""
    if raw is None:
        return current
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise BadRequest(
            f"weight_version={raw!r}: this server counts versions, send an integer string"
        ) from None


class UpdateHandlers:
    """Disk and distributed updates, sessions and flushes over one LocalEngine."""

    def __init__(
        self, engine: LocalEngine, *, fail_loads: int = 0, die_after_buckets: int = 0
    ) -> None:
        self.engine = engine
        self.fail_loads = fail_loads
        self.die_after_buckets = die_after_buckets
        self.groups: dict[str, tuple[Any, str]] = {}  # group_name -> (ProcessGroup, backend)
        self.session_open = False
        self.stats = {
            "weight_updates": 0,  # successful disk loads and distributed calls
            "sessions": 0,  # weight-update sessions closed
            "distributed_calls": 0,  # /update_weights_from_distributed calls that received
            "tensors_received": 0,
            "failed_loads": 0,
        }

    def _injected_failure(self) -> bool:
        if self.fail_loads > 0:
            self.fail_loads -= 1
            self.stats["failed_loads"] += 1
            return True
        return False

    def _after_load(self, body: dict, message: str) -> JSONResponse:
        """The answer once weights changed: a refused flush makes it a failure (as 0.5.23)."""
        self.stats["weight_updates"] += 1
        if body.get("flush_cache", True) and self.engine.busy():
            return error_response(NOT_FLUSHED)
        return JSONResponse({"success": True, "message": message, "num_paused_requests": 0})

    async def update_from_disk(self, request: Request) -> JSONResponse:
        body = await request.json()
        path = body.get("model_path")
        if not path:
            raise BadRequest("update_weights_from_disk needs model_path")
        version = parse_version(body.get("weight_version"), self.engine.weight_version)
        if body.get("abort_all_requests"):
            await self.engine.abort(None)
        if self._injected_failure():
            return error_response(f"failed to load weights from {path!r}: injected failure")
        try:
            await self.engine.update_weights(str(path), version)
        except (OSError, ValueError, EngineRequestError) as exc:
            return error_response(f"failed to load weights from {path!r}: {exc}")
        return self._after_load(body, f"loaded {path}")

    async def flush_cache(self, request: Request) -> JSONResponse:
        if self.engine.busy():
            return error_response("Cache not flushed because there are pending requests.")
        return JSONResponse({"success": True})

    async def begin(self, request: Request) -> JSONResponse:
        if self.session_open:
            raise BadRequest(
                "a weight-update session is already open; call end_weight_update() first"
            )
        self.session_open = True
        return JSONResponse({"success": True, "message": "Success"})

    async def end(self, request: Request) -> JSONResponse:
        if not self.session_open:
            raise BadRequest("no weight-update session is open; call begin_weight_update() first")
        self.session_open = False
        self.stats["sessions"] += 1
        return JSONResponse({"success": True, "message": "Success"})

    async def destroy_group(self, request: Request) -> JSONResponse:
        """As 0.5.23 (model_runner_components/weight_updater.py): 400 for an unknown group."""
        from gspo_agents.rollout.weight_group import destroy_group

        body = await request.json()
        name = str(body.get("group_name", "weight_update_group"))
        if name not in self.groups:
            return error_response("The group to be destroyed does not exist.")
        group, _ = self.groups.pop(name)
        await asyncio.to_thread(destroy_group, group)
        self.stats["groups_destroyed"] = self.stats.get("groups_destroyed", 0) + 1
        return JSONResponse(
            {"success": True, "message": "Succeeded to destroy custom process group."}
        )

    async def init_group(self, request: Request) -> JSONResponse:
        from gspo_agents.rollout.weight_group import init_weights_group

        body = await request.json()
        name = str(body.get("group_name", "weight_update_group"))
        backend = str(body.get("backend", "gloo"))
        if backend == "nccl" and not torch.cuda.is_available():
            raise BadRequest("backend nccl needs CUDA; this local server runs on CPU, use gloo")
        group = await asyncio.to_thread(
            init_weights_group,
            master_address=str(body["master_address"]),
            master_port=int(body["master_port"]),
            rank=int(body.get("rank_offset", 1)),
            world_size=int(body["world_size"]),
            group_name=name,
            backend=backend,
        )
        self.groups[name] = (group, backend)
        return JSONResponse({"success": True, "message": f"joined {name}"})

    async def update_from_distributed(self, request: Request) -> JSONResponse:
        body = await request.json()
        if not self.session_open:  # checked before receiving: the sender is left waiting
            raise BadRequest(
                "update_weights_from_distributed must run between begin_weight_update() and "
                "end_weight_update()"
            )
        name = str(body.get("group_name", "weight_update_group"))
        if name not in self.groups:
            raise BadRequest(f"no weight update group {name!r}: call /init_weights_update_group")
        group, backend = self.groups[name]
        names, dtypes, shapes = body["names"], body["dtypes"], body["shapes"]
        if not len(names) == len(dtypes) == len(shapes):
            raise BadRequest("names, dtypes and shapes must have the same length")
        version = parse_version(body.get("weight_version"), self.engine.weight_version)
        try:
            tensors = await asyncio.to_thread(_receive, group, backend, dtypes, shapes)
        except (RuntimeError, ValueError) as exc:
            return error_response(f"Failed to receive weights: {exc}")
        self.stats["distributed_calls"] += 1
        self.stats["tensors_received"] += len(tensors)
        if self.stats["distributed_calls"] == self.die_after_buckets:
            os._exit(1)  # fault injection: a worker killed in the middle of an update
        if self._injected_failure():
            return error_response("Failed to load the received weights: injected failure")
        try:
            await self.engine.update_weights_from_tensors(
                dict(zip(names, tensors, strict=True)), version
            )
        except EngineRequestError as exc:
            return error_response(str(exc))
        return self._after_load(body, f"received {len(names)} tensors")


def _receive(group, backend: str, dtypes: list[str], shapes: list[list[int]]) -> list[torch.Tensor]:
    """Receive broadcasts from rank 0 in the order of `names` (the protocol's contract)."""
    for dtype in dtypes:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {list(_DTYPES)}")
    device = "cuda" if backend == "nccl" else "cpu"
    out = []
    for dtype, shape in zip(dtypes, shapes, strict=True):
        tensor = torch.empty(shape, dtype=_DTYPES[dtype], device=device)
        opts = torch.distributed.BroadcastOptions()
        opts.rootRank = 0
        group.broadcast([tensor], opts).wait()
        out.append(tensor.cpu())
    return out
