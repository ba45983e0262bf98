"""Weight updates as LoRA adapters, for SGLang workers that load them (SGLang 0.5.23).

A LoRA run's exported directory holds the merged weights and, in `adapter/`, the adapter alone
(PEFT format). Where every worker runs with `--enable-lora`, a pool shaped for the adapter
(`--max-lora-rank` >= its rank, its target modules within `--lora-target-modules`) and room for
three adapters (`--max-loaded-loras` unset or >= 3), an update ships the adapter instead of the
whole model, per worker:

  POST /load_lora_adapter {lora_name: gspo-v<version>, lora_path: <dir>/adapter}
  POST /update_weight_version {new_version, abort_all_requests: false}
  POST /unload_lora_adapter {lora_name: ...}   for every adapter but the new and the previous

and every later /generate names the adapter in `lora_path`. The previous adapter stays loaded
one update longer because SGLang's unload waits for the requests that use it, and requests an
in_place / retract pause kept are still running on it. Any other worker set gets the merged
weights through /update_weights_from_disk (or NCCL), as a full fine-tuning run does.

A worker that missed an adapter update is not replayed (the last replayable update is the
base's): it stays out of rotation until the next update reaches it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

ADAPTER_DIR = "adapter"  # beside the merged weights (the learner's export layout)
MIN_LOADED = 3  # new, previous (maybe still in use), and the one being unloaded


def adapter_of(path: str) -> Path | None:
    """The adapter directory of an exported LoRA model, or None (a full model)."""
    adapter = Path(path) / ADAPTER_DIR
    return adapter if (adapter / "adapter_config.json").is_file() else None


def why_not_adapter(adapter: Path, infos: list[dict[str, Any]]) -> str | None:
    """Why these workers (their /server_info) cannot take `adapter`; None when all can."""
    config = json.loads((adapter / "adapter_config.json").read_text())
    rank, targets = int(config["r"]), set(config.get("target_modules") or [])
    for info in infos:
        if not info.get("enable_lora"):
            return "a worker runs without --enable-lora"
        if rank > int(info.get("max_lora_rank") or 0):
            return f"a worker's --max-lora-rank {info.get('max_lora_rank')} < rank {rank}"
        if not targets <= set(info.get("lora_target_modules") or []):
            return f"a worker's --lora-target-modules lack some of {sorted(targets)}"
        loaded = info.get("max_loaded_loras")
        if loaded is not None and int(loaded) < MIN_LOADED:
            return f"a worker's --max-loaded-loras {loaded} < {MIN_LOADED}"
    return None


async def load_on_workers(
    http, urls: list[str], adapter: Path, version: int, loaded: list[str], timeout_s: float
) -> dict[str, str]:
    """Load `adapter` as version `version` on every worker; returns {url: error} of those that
    failed. `loaded` (names, oldest first) gains the new name; old ones are unloaded."""
    name = f"gspo-v{version}"
    stale = loaded[:-1]  # keep the previous adapter one update longer

    async def one(url: str) -> None:
        await http.control(
            url, "/load_lora_adapter", {"lora_name": name, "lora_path": str(adapter)}, timeout_s
        )
        body = {"new_version": str(version), "abort_all_requests": False}
        await http.control(url, "/update_weight_version", body, timeout_s)
        for old in stale:
            await http.control(url, "/unload_lora_adapter", {"lora_name": old}, timeout_s)

    from gspo_agents.rollout.engine import EngineError

    results = await asyncio.gather(*(one(u) for u in urls), return_exceptions=True)
    failed = {}
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, EngineError):
            failed[url] = str(result)
        elif isinstance(result, BaseException):
            raise result  # a bug, not a worker failure
    loaded[:] = [*loaded[-1:], name]
    return failed
