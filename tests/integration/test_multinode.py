"""A multi-node learner as the README's cluster section runs it: one `torchrun --nnodes=2` per
node, meeting at a c10d rendezvous endpoint. Here the two "nodes" are two torchrun launchers on
this machine (one learner process each, gloo over loopback); node 0's rank 0 runs the rollouts
and logs, and both hold FSDP2 shards of the model.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_run import TINY_RUN

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
]  # real trainings; a loaded machine is slow

FAST = [*TINY_RUN, "logger.wandb_mode=disabled"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_cmd(node_rank: int, port: int, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        f"--node_rank={node_rank}",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{port}",
        "--rdzv_id=gspo-multinode-test",
        "-m",
        "gspo_agents.train",
        f"trainer.run_dir={run_dir}",
        "trainer.steps=2",
        *FAST,
    ]


def test_two_nodes_train_one_run_over_a_rendezvous(tmp_path):
    run_dir, port = tmp_path / "run", free_port()
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    procs = [
        subprocess.Popen(node_cmd(i, port, run_dir), stdout=log.open("w"), stderr=subprocess.STDOUT)
        for i, log in enumerate(logs)
    ]
    try:
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0], "\n".join(log.read_text()[-3000:] for log in logs)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # logged once, by the rollout rank
    assert all(r["loss"] == r["loss"] for r in rows)
    shards = list((run_dir / "checkpoint" / "dcp").glob("*.distcp"))
    assert len(shards) == 2, shards  # one shard file per learner process, one per node
