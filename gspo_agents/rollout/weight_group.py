"""A process group for broadcasting weights from the learner to SGLang workers (NCCL on GPU).

Formed the way SGLang forms its weight-update group, outside the learner's default group; both
the client (SGLangEngine) and our CPU server (gloo) use it.
"""

from __future__ import annotations

import logging

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


def destroy_group(group) -> None:
    import torch.distributed as dist

    try:
        dist.destroy_process_group(group)
    except (AssertionError, RuntimeError, ValueError) as exc:
        log.debug("destroying weight group: %s", exc)
