"""The disk-path half of SGLangEngine's weight updates: the learner's starting weights, each
step's HF directory (loaded by the workers, or broadcast when update_mode is nccl: GroupUpdates,
sglang_update.py) and LoRA adapters (sglang_lora.py).

DiskUpdates is a part of SGLangEngine (like GroupUpdates): it uses the engine's worker pool,
control client and settings, and has no state of its own but `last_update_dropped`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from gspo_agents.rollout.engine import EngineError, EngineRequestError
from gspo_agents.rollout.sglang_http import ControlClient
from gspo_agents.rollout.sglang_lora import adapter_of, load_on_workers, why_not_adapter
from gspo_agents.rollout.sglang_wire import disk_update_body, flush_allowed, parse_version
from gspo_agents.rollout.sglang_workers import WorkerPool
from gspo_agents.rollout.weight_group import read_hf_tensors

log = logging.getLogger("gspo_agents.rollout.sglang_engine")  # where users filter its warnings

# The weight version of a worker's boot weights once they are known not to be the learner's
# starting weights: no learner version, so a worker reporting them is always out of sync.
BOOT_WEIGHTS = -1


def _same_path(reported: Any, path: str) -> bool:
    if not isinstance(reported, str):
        return False
    return reported.rstrip("/") == path.rstrip("/") or os.path.realpath(reported) == (
        os.path.realpath(path)
    )


def _numeric(model: dict[str, Any]) -> bool:
    """Whether a worker's weight_version names an update (SGLang boots at "default")."""
    return parse_version(model.get("weight_version"), BOOT_WEIGHTS) != BOOT_WEIGHTS


class StartWeightsMismatch(EngineRequestError):
    """The workers do not run the learner's starting weights, and could not be given them."""


class DiskUpdates:
    """sync_start_weights and update_weights of SGLangEngine (a mixin: the engine provides the
    attributes below; annotations only, so that nothing here shadows the engine's or
    GroupUpdates' methods in the MRO)."""

    _http: ControlClient
    _pool: WorkerPool
    _update_s: float
    _update_mode: str
    _said_merged: bool
    _adapters: list[str]
    _lora_name: str | None
    last_update_dropped: dict[str, str]
    _ensure_started: Callable[[], Awaitable[None]]
    _update_live_workers: Callable[..., Awaitable[None]]

    async def sync_start_weights(self, path: str, version: int) -> bool:
        """Before the first step: make every worker run the learner's starting weights (the HF
        directory `path`, the learner's `version`). A worker is trusted to run them only when
        it reports its boot weights (a non-numeric weight_version, SGLang's "default") of
        exactly `path` (/model_info model_path) and the learner starts at version 0; otherwise
        they are pushed (update_mode disk or nccl), and a worker's boot weights count as no
        learner version from then on. Returns whether they were pushed. Raises
        StartWeightsMismatch naming both sides when no worker could take them."""
        await self._ensure_started()
        reports = await self._pool.model_reports()
        differ = {
            url: (str(m.get("model_path")), str(m.get("weight_version")))
            for url, m in reports.items()
            if version != 0 or not _same_path(m.get("model_path"), path) or _numeric(m)
        }
        if not differ:
            self._pool.start_version = version
            return False
        self._pool.start_version = BOOT_WEIGHTS
        try:
            await self.update_weights(path, version)
        except EngineError as exc:
            url, (model, raw) = next(iter(differ.items()))
            raise StartWeightsMismatch(
                f"SGLang worker {url} runs {model} (weight version {raw!r}) but the learner "
                f"starts from {path} (version {version}), and pushing it failed: {exc}. Launch "
                f"the workers with --model-path {path}, or make {path} readable by them "
                "(engine.update_mode=nccl sends the weights over the network instead)"
            ) from exc
        log.warning(
            "SGLang worker(s) %s did not run the learner's starting weights %s (they reported "
            "%s): pushed them as version %d before step 1",
            ", ".join(differ),
            path,
            "; ".join(f"{m} at version {v!r}" for m, v in differ.values()),
            version,
        )
        return True

    async def update_weights(self, path: str, version: int) -> None:
        """Every worker takes the HF safetensors in `path`: it loads them itself (update_mode
        "disk"; a filesystem all workers see), or we broadcast them over the weight group
        ("nccl"; formed at the first update). A worker that fails leaves rotation and gets this
        update replayed from `path` later; the engine moves to `version` unless every worker
        failed (then it raises). `last_update_dropped` names the failed workers."""
        await self._ensure_started()
        await self._pool.follow_router()
        adapter = adapter_of(path)
        if adapter is not None and await self._update_adapter(adapter, version):
            return
        if self._update_mode == "nccl":
            named = await asyncio.to_thread(read_hf_tensors, path)
            await self._update_live_workers(named, version, replay_path=path)
            return
        body = disk_update_body(path, version, flush_allowed(self._pool.pause_mode))
        async with self._pool.updating():
            failed = await self._pool.broadcast(
                "/update_weights_from_disk", body, timeout_s=self._update_s, weight_update=True
            )
            self._pool.set_weights(version, replayable=(path, version))
        self._report_dropped(version, failed)

    async def _update_adapter(self, adapter, version: int) -> bool:
        """A LoRA run's update as an adapter (sglang_lora.py), where every worker takes one;
        False: they cannot, send the merged weights instead (said once)."""
        why = why_not_adapter(adapter, [w.info for w in self._pool.workers])
        if why is not None:
            if not self._said_merged:
                log.info("LoRA updates go to SGLang as merged weights: %s", why)
                self._said_merged = True
            return False
        async with self._pool.updating():
            urls = self._pool.urls
            failed = await load_on_workers(
                self._http, urls, adapter, version, self._adapters, self._update_s
            )
            if len(failed) == len(urls):
                raise EngineError(
                    "loading the LoRA adapter failed on every worker: " + "; ".join(failed.values())
                )
            self._pool.settle_update(failed)
            self._pool.set_weights(version, replayable=None)
        self._lora_name = self._adapters[-1]
        self._report_dropped(version, failed)
        return True

    def _report_dropped(self, version: int, failed: dict[str, str]) -> None:
        self.last_update_dropped = dict(failed)
        if failed:
            log.warning(
                "weight update to version %d failed on %d of %d SGLang workers, which are out of "
                "rotation until it is replayed to them (or the next update reaches them): %s",
                version,
                len(failed),
                len(self._pool.workers),
                "; ".join(f"{url}: {error}" for url, error in failed.items()),
            )
