"""Checkpoints (torch.distributed.checkpoint) and HF-format export of the possibly sharded model.

A checkpoint directory holds:
  dcp/            model and optimizer state, each rank writing its shards (DCP format)
  trainer.pt      step, scheduler, counters and the caller's extra_state (rank 0)
  rng_rank{r}.pt  RNG states of rank r
Writes go to `<dir>.tmp` and are renamed into place only when complete, so a process killed at any
moment leaves either the previous checkpoint or the new one, never a torn one. The previous
checkpoint is kept as `<dir>.old` during the swap and used if the swap itself was interrupted,
and then as `<dir>.prev`: if the newest checkpoint cannot be read (a corrupt file), loading says
which file and falls back to it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from gspo_agents.learner.errors import CheckpointError
from gspo_agents.learner.lora import (
    ADAPTER_DIR,
    adapter_tensors,
    base_model,
    is_lora,
    merged_tensors,
    scaling,
    write_adapter,
)
from gspo_agents.learner.parallel import ProcessInfo, all_reduce_

WEIGHT_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".safetensors.index.json",
    ".bin.index.json",
)
MAX_SHARD_BYTES = 5 * 1024**3


# --------------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------------
def save(
    ckpt_dir: str,
    info: ProcessInfo,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict,
) -> None:
    """Write a checkpoint; on any failure (disk full, read-only, ...) raise CheckpointError.

    A failed save leaves the previous checkpoint untouched and removes its partial `<dir>.tmp`
    (which may hold most of the space a full disk needs back). Every rank learns of a failure on
    any rank, so none waits forever in a barrier the failed one never reaches.
    """
    final = Path(ckpt_dir)
    tmp = final.with_name(final.name + ".tmp")

    def fresh_tmp() -> None:
        if info.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)

    def write() -> None:
        model_sd, optim_sd = _state_dicts(model, optimizer)
        with _quiet_single_process(info):
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / "dcp"))
        torch.save(_rng_state(), tmp / f"rng_rank{info.rank}.pt")
        if info.rank == 0:
            torch.save({**trainer_state, "world_size": info.world_size}, tmp / "trainer.pt")

    def swap() -> None:
        if info.rank == 0:
            _swap_into_place(tmp, final, keep_previous=True)

    try:
        for stage in (fresh_tmp, write, swap):
            _on_every_rank(stage, info)
    except _SaveFailed as exc:
        if info.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"could not save the checkpoint to {final}: {exc} ({_free_space(final.parent)}). "
            "The previous checkpoint there (if any) is unchanged and a resume uses it; free "
            f"space on or make writable {final.parent}"
        ) from exc.__cause__


class _SaveFailed(Exception):
    pass


def _on_every_rank(stage, info: ProcessInfo) -> None:
    """Run one stage of a save; then all ranks agree whether it failed anywhere (a barrier)."""
    error: BaseException | None = None
    try:
        stage()
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - OSError, pickling, ...
        error = exc  # (DCP's CheckpointException derives from BaseException, not Exception)
    if info.distributed:
        flag = torch.tensor([0.0 if error is None else 1.0], device=info.device)
        if float(all_reduce_(flag, info)) > 0 and error is None:
            raise _SaveFailed("another rank failed to write its part")
    if error is not None:
        # DCP wraps the cause in a multi-line traceback; its last line names it.
        lines = [line for line in str(error).splitlines() if line.strip()] or [""]
        raise _SaveFailed(f"{type(error).__name__}: {lines[-1].strip()[:400]}") from error


def _free_space(path: Path) -> str:
    """Free bytes where the save went: a full disk shows up as torch's odd 'unexpected pos'."""
    try:
        return f"{shutil.disk_usage(path).free / 2**20:.1f} MiB free on that filesystem"
    except OSError as exc:
        return f"free space unknown: {exc}"


@contextmanager
def _quiet_single_process(info: ProcessInfo):
    """DCP warns that it runs without a process group; single-process is intended here."""
    with warnings.catch_warnings():
        if not info.distributed:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _swap_into_place(tmp: Path, final: Path, keep_previous: bool = False) -> None:
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    if keep_previous and old.exists():
        prev = final.with_name(final.name + ".prev")
        shutil.rmtree(prev, ignore_errors=True)
        os.replace(old, prev)
    shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(final.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def candidates(ckpt_dir: str) -> list[Path]:
    """Complete checkpoints at `ckpt_dir`, newest first: the checkpoint, the one an interrupted
    swap left as `.old`, the previous one kept as `.prev`."""
    final = Path(ckpt_dir)
    found = []
    for suffix in ("", ".old", ".prev"):
        candidate = final.with_name(final.name + suffix)
        if (candidate / "trainer.pt").is_file() and (candidate / "dcp").is_dir():
            found.append(candidate)
    return found


def resolve(ckpt_dir: str) -> Path:
    """The newest complete checkpoint at `ckpt_dir` (see `candidates`)."""
    found = candidates(ckpt_dir)
    if not found:
        raise CheckpointError(
            f"no complete checkpoint at {ckpt_dir} (expected trainer.pt and dcp/); "
            "start without resume or point to the run's checkpoint directory"
        )
    return found[0]


def load(
    ckpt_dir: str, info: ProcessInfo, model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict:
    """Load the newest readable checkpoint; an unreadable one is named and the previous used."""
    resolve(ckpt_dir)  # none at all: say so
    failures = []
    for path in candidates(ckpt_dir):
        try:
            state = _load_one(path, info, model, optimizer)
        except CheckpointError as exc:
            failures.append(str(exc))
            continue
        if failures:
            print(
                f"warning: {failures[-1]}; falling back to the previous checkpoint {path} "
                f"(step {state.get('extra_state', {}).get('step', '?')})",
                file=sys.stderr,
                flush=True,
            )
        return state
    raise CheckpointError(
        "no readable checkpoint: "
        + "; ".join(failures)
        + ". Start over with trainer.resume=false (the run is moved aside, not deleted)"
    )


def _load_one(
    path: Path, info: ProcessInfo, model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict:
    trainer_file = path / "trainer.pt"
    try:
        trainer_state = torch.load(trainer_file, weights_only=False)
    except Exception as exc:  # noqa: BLE001 - pickle, zip and EOF errors of a damaged file
        raise CheckpointError(
            f"checkpoint file {trainer_file} is unreadable ({type(exc).__name__}: {exc})"
        ) from exc
    model_sd, optim_sd = _state_dicts(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    try:
        with _quiet_single_process(info):
            dcp.load(state, checkpoint_id=str(path / "dcp"))
    except (Exception, CheckpointException) as exc:  # a damaged shard or a mismatched model
        lines = [line for line in str(exc).splitlines() if line.strip()] or [""]
        raise CheckpointError(
            f"checkpoint {path / 'dcp'} is unreadable or does not match this model "
            f"({type(exc).__name__}: {lines[-1].strip()[:300]})"
        ) from exc
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=_state_options(model),
    )
    rng_file = path / f"rng_rank{info.rank}.pt"
    if trainer_state.get("world_size") == info.world_size and rng_file.is_file():
        try:
            _set_rng_state(torch.load(rng_file, weights_only=False))
        except Exception as exc:  # noqa: BLE001
            raise CheckpointError(f"checkpoint file {rng_file} is unreadable: {exc}") from exc
    return trainer_state


def _state_options(model: nn.Module) -> StateDictOptions:
    """A LoRA model's checkpoint holds its trainable tensors only (the adapters): the frozen
    base is the start model, read again from `model_path` at resume."""
    if is_lora(model):
        return StateDictOptions(ignore_frozen_params=True, strict=False)
    return StateDictOptions()


def _state_dicts(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_state_options(model))
    if is_lora(model):  # a tied output layer is reported apart from its frozen embedding
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        model_sd = {k: v for k, v in model_sd.items() if k in trainable}
    return model_sd, optim_sd


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --------------------------------------------------------------------------------------------
# HF export
# --------------------------------------------------------------------------------------------
def export_hf(
    out_dir: str, info: ProcessInfo, model: nn.Module, source_dir: str, dtype: torch.dtype
) -> str:
    """Gather full tensors and write an HF directory: safetensors + the source's config/tokenizer.

    All ranks must call (the gather is collective); rank 0 writes. The directory appears complete
    or not at all (written to `<out_dir>.tmp`, then renamed).
    """
    from safetensors.torch import save_file

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    final = Path(out_dir)
    tmp = final.with_name(final.name + ".tmp")

    def write() -> None:
        if info.rank != 0:
            return
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _copy_non_weight_files(Path(source_dir), tmp)
        tensors = state
        if is_lora(model):  # merged for any engine; the adapter alone beside it
            write_adapter(tmp / ADAPTER_DIR, model, adapter_tensors(state), source_dir)
            tensors = merged_tensors(state, scaling(model))
        shards = _shards(_export_tensors(tensors, base_model(model), dtype))
        for name, shard in shards.items():
            save_file(shard, str(tmp / name), metadata={"format": "pt"})
        _write_shard_index(tmp, shards)
        _swap_into_place(tmp, final)

    try:
        _on_every_rank(write, info)  # also the barrier: every rank learns of rank 0's failure
    except _SaveFailed as exc:
        if info.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"could not export the HF weights to {final}: {exc} ({_free_space(final.parent)}); "
            f"free space on or make writable {final.parent}"
        ) from exc.__cause__
    return str(final)


def _copy_non_weight_files(src: Path, dst: Path) -> None:
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES):
            shutil.copy2(f, dst / f.name)


def _export_tensors(state: dict, model: nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    out = {}
    for name, t in _checkpoint_layout(model, state).items():
        if tied and name == "lm_head.weight":
            continue  # stored once, as the input embedding
        t = t.detach()
        out[name] = (t.to(dtype) if t.is_floating_point() else t).contiguous()
    return out


def _checkpoint_layout(model: nn.Module, state: dict) -> dict:
    """Undo transformers' load-time weight conversions (e.g. Qwen3-MoE experts fused into one
    tensor in memory) so the export has the on-disk names other engines (SGLang) expect."""
    try:
        from transformers.modeling_utils import revert_weight_conversion
    except ImportError:  # transformers < 5 keeps the on-disk layout in memory
        return state
    return revert_weight_conversion(model, dict(state))


def _shards(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if total <= MAX_SHARD_BYTES:
        return {"model.safetensors": tensors}
    groups: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if groups[-1] and size + nbytes > MAX_SHARD_BYTES:
            groups.append({})
            size = 0
        groups[-1][name] = t
        size += nbytes
    n = len(groups)
    return {f"model-{i + 1:05d}-of-{n:05d}.safetensors": g for i, g in enumerate(groups)}


def _write_shard_index(out_dir: Path, shards: dict[str, dict[str, torch.Tensor]]) -> None:
    if len(shards) == 1:
        return
    weight_map = {name: fname for fname, g in shards.items() for name in g}
    total = sum(t.numel() * t.element_size() for g in shards.values() for t in g.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
