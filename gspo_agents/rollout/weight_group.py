"""A process group for broadcasting weights from the learner to SGLang workers (NCCL on GPU),
and the pieces of an update over it: buckets, a background send, tensors read from an HF dir.

Formed the way SGLang forms its weight-update group, outside the learner's default group; both
the client (SGLangEngine) and our CPU server (gloo) use it. Not here: the HTTP side of an update
(sglang_engine.py) and what a worker does with the tensors (rollout/server.py, or SGLang).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def init_weights_group(
    master_address: str,
    master_port: int,
    rank: int,
    world_size: int,
    group_name: str,
    backend: str = "nccl",
    timeout_s: float = 300.0,
):
    """A process group outside the default one (the learner may already have its own), formed
    the way SGLang forms its weight-update group: TCP rendezvous, a store prefixed by the group
    name, torch's process-group helper. Blocks until all `world_size` ranks join."""
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    timeout = timedelta(seconds=timeout_s)
    store, rank, world_size = next(
        c10d.rendezvous(f"tcp://{master_address}:{master_port}", rank, world_size, timeout=timeout)
    )
    store.set_timeout(timeout)
    store = dist.PrefixStore(group_name, store)
    group, _ = c10d._new_process_group_helper(
        world_size,
        rank,
        [],
        dist.Backend(backend),
        store,
        group_name=group_name,
        timeout=timeout,
    )
    c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


def broadcast_tensors(group, tensors: list) -> None:
    import torch.distributed as dist

    for tensor in tensors:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        group.broadcast([tensor.contiguous()], opts).wait()


def start_broadcast(group, tensors: list) -> concurrent.futures.Future:
    """Broadcast `tensors` from a daemon thread. A collective cannot be cancelled: when a worker
    refuses its part, the send blocks until the group's timeout. A daemon thread lets the caller
    report the worker's error at once and the process exit without waiting for that timeout
    (asyncio.to_thread's pool is joined at exit)."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            broadcast_tensors(group, tensors)
        except BaseException as exc:  # handed to the waiting caller
            future.set_exception(exc)
        else:
            future.set_result(None)

    threading.Thread(target=run, name="weight-broadcast", daemon=True).start()
    return future


def bucket_by_bytes(items: Sequence[tuple[str, Any]], bucket_bytes: int) -> list[list]:
    """Consecutive (name, tensor) pairs in buckets of at most `bucket_bytes` (a tensor larger
    than that gets a bucket of its own). SGLang 0.5.23 allocates every tensor of one
    /update_weights_from_distributed call, unsharded, on every GPU before it loads any
    (model_runner_components/weight_updater.py: receive_weights_from_distributed); bounded
    buckets bound that spike, as slime and verl do."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket size must be positive, got {bucket_bytes} bytes")
    buckets: list[list] = []
    size = 0
    for name, tensor in items:
        nbytes = tensor.numel() * tensor.element_size()
        if not buckets or size + nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append((name, tensor))
        size += nbytes
    return buckets


def read_hf_tensors(path: str) -> list[tuple[str, Any]]:
    """The (name, tensor) pairs of an HF safetensors directory, in file then key order."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}: not an HF weights directory")
    out: list[tuple[str, Any]] = []
    for file in files:
        out += sorted(load_file(str(file)).items())
    return out


def destroy_group(group) -> None:
    import torch.distributed as dist

    try:
        dist.destroy_process_group(group)
    except (AssertionError, RuntimeError, ValueError) as exc:
        log.debug("destroying weight group: %s", exc)
