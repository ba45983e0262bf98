"""The stand-in server's LoRA adapter endpoints, with SGLang 0.5.23's rules.

SGLang (`--enable-lora --max-lora-rank R --lora-target-modules ...`) loads adapters at run time:
- POST /load_lora_adapter {lora_name, lora_path, pinned} -> 200 {success, error_message,
  loaded_adapters} or 400 {success: false, error_message} when LoRA is not enabled ("LoRA is not
  enabled. Please set `--enable-lora` to enable LoRA."), the name is taken ("LoRA with name X
  already exists. Loaded LoRAs: ..."), `max_loaded_loras` adapters are loaded already, or the
  adapter does not fit the memory pool (its rank above `--max-lora-rank`, a target module
  outside `--lora-target-modules`); tokenizer_manager.load_lora_adapter, lora_registry.py,
  lora_manager.validate_new_adapter.
- POST /unload_lora_adapter {lora_name} -> 400 for a name not loaded ("LoRA with name X does
  not exist. Loaded LoRAs: ..."); SGLang waits for the requests using it to finish.
- POST /generate with `lora_path` = a loaded adapter's name; any other name is a 400 ("The
  following requested LoRA adapters are not loaded: X").
- POST /update_weight_version {new_version, abort_all_requests (default true)}: the version
  /model_info and every answer report, weights unchanged.
/server_info reports enable_lora, max_lora_rank, lora_target_modules and max_loaded_loras.

A stand-in's limit, stated: the LocalEngine holds one model, so this server applies the most
recently loaded adapter (merged into the base) to every request; a request naming another
loaded adapter, or none while one is applied, is refused with a 400 that says so, never served
with the wrong weights.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from gspo_agents.rollout.local_engine import LocalEngine
from gspo_agents.rollout.server_updates import BadRequest, error_response, parse_version

NOT_ENABLED = "LoRA is not enabled. Please set `--enable-lora` to enable LoRA."


@dataclass(slots=True)
class LoraSettings:
    enabled: bool = False
    max_rank: int | None = None
    target_modules: tuple[str, ...] = ()
    max_loaded: int | None = None

    def check_launch(self) -> None:
        """SGLang refuses to start LoRA without the pool's shape (no --lora-paths here)."""
        if self.enabled and (not self.max_rank or not self.target_modules):
            raise ValueError(
                "--enable-lora without initial --lora-paths needs both --max-lora-rank and "
                "--lora-target-modules (as SGLang)"
            )

    def info(self) -> dict[str, Any]:
        return {
            "enable_lora": self.enabled,
            "max_lora_rank": self.max_rank,
            "lora_target_modules": list(self.target_modules) or None,
            "max_loaded_loras": self.max_loaded,
        }


@dataclass(slots=True)
class LoraHandlers:
    engine: LocalEngine
    settings: LoraSettings
    base_path: str
    loaded: dict[str, str] = field(default_factory=dict)  # name -> adapter path
    applied: str | None = None  # the adapter merged into the engine's weights

    def _fail(self, message: str) -> JSONResponse:
        return JSONResponse({"success": False, "error_message": message}, status_code=400)

    def _names(self) -> str:
        return f"dict_keys({list(self.loaded)})"

    async def load(self, request: Request) -> JSONResponse:
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if not self.settings.enabled:
            return self._fail(NOT_ENABLED)
        if not name or not path:
            raise BadRequest("load_lora_adapter needs lora_name and lora_path")
        if self.settings.max_loaded is not None and len(self.loaded) >= self.settings.max_loaded:
            return self._fail(
                f"Cannot load LoRA adapter {name} at path {path}. Maximum number of loaded LoRA "
                f"adapters is {self.settings.max_loaded}. Please unload some LoRA adapters "
                "before loading new ones."
            )
        if name in self.loaded:
            return self._fail(
                f"LoRA with name {name} already exists. Loaded LoRAs: {self._names()}"
            )
        why = self._incompatible(name, Path(path))
        if why:
            return self._fail(why)
        tensors = await asyncio.to_thread(merged_state, self.base_path, path)
        await self.engine.update_weights_from_tensors(tensors, self.engine.weight_version)
        self.loaded[name] = str(path)
        self.applied = name
        return JSONResponse({"success": True, "error_message": "", "loaded_adapters": self.loaded})

    def _incompatible(self, name: str, path: Path) -> str | None:
        try:
            config = json.loads((path / "adapter_config.json").read_text())
        except (OSError, ValueError) as exc:
            return f"Failed to load LoRA adapter {name} from {path}: {exc}"
        rank, targets = int(config["r"]), set(config.get("target_modules") or [])
        allowed = set(self.settings.target_modules)
        if rank > (self.settings.max_rank or 0) or not targets <= allowed:
            return (
                f"LoRA adapter {name} with rank {rank} and target modules {sorted(targets)} is "
                "incompatible with the current LoRA memory pool configuration "
                f"(max_lora_rank={self.settings.max_rank}, lora_target_modules="
                f"{sorted(allowed)})."
            )
        return None

    async def unload(self, request: Request) -> JSONResponse:
        body = await request.json()
        name = body.get("lora_name")
        if not self.settings.enabled:
            return self._fail(NOT_ENABLED)
        if name not in self.loaded:
            return self._fail(
                f"LoRA with name {name} does not exist. Loaded LoRAs: {self._names()}"
            )
        del self.loaded[name]
        if self.applied == name:  # back to the base weights
            tensors = await asyncio.to_thread(base_state, self.base_path)
            await self.engine.update_weights_from_tensors(tensors, self.engine.weight_version)
            self.applied = None
        return JSONResponse({"success": True, "error_message": "", "loaded_adapters": self.loaded})

    async def update_weight_version(self, request: Request) -> JSONResponse:
        body = await request.json()
        if "new_version" not in body:
            raise BadRequest("update_weight_version needs new_version")
        version = parse_version(body["new_version"], self.engine.weight_version)
        if body.get("abort_all_requests", True):  # SGLang's default
            await self.engine.abort(None)
        await self.engine.update_weights_from_tensors({}, version)
        return JSONResponse({"success": True, "new_version": str(version)})

    def check_generate(self, body: dict[str, Any]) -> JSONResponse | None:
        """The 400 SGLang (or this stand-in's one-model limit) gives a /generate body; None: ok."""
        wanted = body.get("lora_path")
        names = wanted if isinstance(wanted, list) else [wanted]
        asked = {n for n in names if n is not None}
        if asked and not self.settings.enabled:
            return error_response(NOT_ENABLED)
        missing = asked - set(self.loaded)
        if missing:
            return error_response(
                f"The following requested LoRA adapters are not loaded: {sorted(missing)[0]}\n"
                f"Loaded adapters: {self._names()}."
            )
        if any(n != self.applied for n in names):
            return error_response(
                f"this stand-in applies one adapter at a time ({self.applied!r}); the request "
                f"asked for {sorted(map(str, set(names)))}"
            )
        return None


def merged_state(base_path: str, adapter_path: str) -> dict:
    """The base model's state dict with the adapter merged in (PEFT merge_and_unload)."""
    from peft import PeftModel

    from gspo_agents.models import load_model

    model = PeftModel.from_pretrained(load_model(base_path), adapter_path).merge_and_unload()
    return dict(model.state_dict())


def base_state(base_path: str) -> dict:
    from gspo_agents.models import load_model

    return dict(load_model(base_path).state_dict())
