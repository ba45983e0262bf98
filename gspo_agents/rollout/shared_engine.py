"""An engine client whose workers another process updates (`rollout.drivers=all_ranks`: rank 0
loads the weights, every rank's SGLangEngine client generates against the same workers).

SGLangEngine discards an answer at another weight version than its own unless an update raced
the request (its worker pool's update epoch, odd while one runs), and then takes that worker out
of rotation as restarted. A client that did not make the update must therefore be told it is
under way and what version it ended at. SGLangEngine has no public call for that yet, so these
two functions set the pool's epoch and version, the same two fields its own `update_weights`
moves; an engine without such a pool (LocalEngine, test fakes) is left alone.
"""

from __future__ import annotations

from typing import Any


def _pool(engine: Any):
    pool = getattr(engine, "_pool", None)
    return pool if hasattr(pool, "epoch") and hasattr(pool, "version") else None


def note_update_begin(engine: Any) -> None:
    """Another process starts a weight update: answers from now on may carry its version."""
    pool = _pool(engine)
    if pool is not None and pool.epoch % 2 == 0:
        pool.epoch += 1


def note_update_end(engine: Any, version: int) -> None:
    """That update ended with the workers at `version`."""
    pool = _pool(engine)
    if pool is None:
        return
    pool.version = max(pool.version, version)
    if pool.epoch % 2:
        pool.epoch += 1
