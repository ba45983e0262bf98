"""Process group and FSDP2 wrapping.

Launched by torchrun (RANK / WORLD_SIZE in the environment) the learner joins a process group (gloo
on CPU, nccl on CUDA) and shards the model with `fully_shard` per transformer block, then the root.
Started as a plain process it stays single-process and unsharded: the same update code runs, with
the collective calls turned into no-ops.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    distributed: bool  # a process group is in use (FSDP2 sharding, collectives)
    owns_group: bool  # we created the process group, so we destroy it on close


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_process() -> ProcessInfo:
    """Join (or create) the process group when under torchrun; otherwise a single process."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    owns = False
    if launched_by_torchrun() and not dist.is_initialized():
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
        owns = True
    if dist.is_initialized():
        return ProcessInfo(dist.get_rank(), dist.get_world_size(), local_rank, device, True, owns)
    return ProcessInfo(0, 1, 0, device, False, False)


def close_process(info: ProcessInfo) -> None:
    if info.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def run_then_exit(main: Callable[[], object]) -> NoReturn:
    """Run a torchrun worker's `main`, then end the process without interpreter finalization.

    The gloo process group's threads (gloo_tcp_loop, pt_gloo_runloop) outlive
    `destroy_process_group`: DTensor sharding specs keep FSDP2's DeviceMesh, and with it the
    group, alive to the end. Tearing them down during finalization sometimes aborts the process
    ("terminate called without an active exception", SIGABRT: seen in about 1 of 18 two-process
    trainings on a loaded 2-core machine), after all work was done, and torchrun then reports
    the run as failed. So: run the atexit handlers (wandb, worker pools, sandbox sessions),
    flush, and leave with `os._exit`. An exception other than SystemExit propagates as usual."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def use_bf16(mode: str, device: torch.device) -> bool:
    if mode == "auto":
        return device.type == "cuda"
    return mode == "bf16"


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of an HF causal LM (model.model.layers for the Llama/Qwen family),
    also inside a PEFT (LoRA) wrapper."""
    if hasattr(model, "peft_config"):
        model = model.get_base_model()
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ValueError(
            f"cannot find the transformer blocks of {type(model).__name__}: expected "
            "model.<base_model_prefix>.layers (Llama/Qwen-style decoder)"
        )
    return list(layers)


def shard_model(model: nn.Module, bf16: bool) -> None:
    """fully_shard each transformer block, then the root (embeddings, final norm, head)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    for block in transformer_blocks(model):
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)


def set_gradient_sync(model: nn.Module, enabled: bool) -> None:
    """Skip the reduce-scatter on all but the last micro-batch of a minibatch."""
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(enabled)


def all_reduce_(t: torch.Tensor, info: ProcessInfo, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if info.distributed:
        dist.all_reduce(t, op=op)
    return t


def barrier(info: ProcessInfo) -> None:
    if info.distributed:
        dist.barrier()


def broadcast_object(obj, info: ProcessInfo):
    if not info.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
