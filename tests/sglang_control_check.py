"""Replay a client's recorded control requests through SGLang 0.5.23's own control-plane classes
(run as a subprocess, with the pinned sglang on PYTHONPATH, as tests/sglang_io_check.py).

    python tests/sglang_control_check.py RECORDS.json

RECORDS.json: {"requests": [{"path", "body", "live"}...], "answers": [generate answer...],
"controls": {name: [request...]}}. Prints one JSON object: {"sglang", "calls": [{"path",
"success", "message"}], "received", "version", "spans": [{"ours", "sglang"}], "controls":
{name: calls}}; each control is replayed on a fresh updater (the caller's must-fail cases).

What is SGLang's own code here, and what stands in for the GPU:
- The session gate and the flush rule: `SchedulerWeightUpdaterManager`
  (srt/managers/scheduler_components/weight_updater.py) handles every /begin_weight_update,
  /update_weights_from_distributed and /end_weight_update, each built into its io_struct class
  from the recorded body. Stand-ins: the tensor receive and load (they need the GPU group; they
  record names), the TP barrier group (a one-rank gloo group), and the scheduler's flush, which
  follows scheduler.flush_cache: refused unless idle, the waiting queue ignored while paused
  (`live` = requests the server held when the call was made; an abort pause ended them, a
  retract pause moved them to the waiting queue).
- The version spans: srt/utils/weight_versions.py. For each recorded /generate answer, the
  version changes its spans report are fed to compute_weight_version_spans and
  add_weight_versions_to_meta_info; the caller compares SGLang's meta_info with ours and parses
  SGLang's with the client.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from sglang_io_check import import_io_struct


class _Runner:
    def __init__(self, received: list) -> None:
        self.weight_updater = self
        self.received = received

    def begin_weight_update(self) -> None:
        return None

    def end_weight_update(self, *, run_post_load: bool) -> None:
        return None

    def receive_weights_from_distributed(self, names, dtypes, shapes, group_name, load_format):
        self.received.extend(names)  # the GPU receive: the names stand for the tensors
        return list(zip(names, shapes, strict=True))

    def load_weights_from_distributed(self, weights):
        return True, "Succeeded to update parameter online."


class _TpWorker:
    def __init__(self, received: list) -> None:
        self.model_runner = _Runner(received)

    def weight_update_runners(self):
        return [("target", self.model_runner)]


class _Scheduler:
    """Where the updater records the version (Scheduler.record_weight_version_change)."""

    def __init__(self) -> None:
        self.version = "default"

    def record_weight_version_change(self, new_version) -> None:
        if new_version is not None:
            self.version = new_version


def build_updater(received: list, state: dict):
    import torch.distributed as dist
    from sglang.srt.managers.scheduler_components import weight_updater as wu

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    group = dist.new_group(backend="gloo")
    wu.get_parallel = lambda: SimpleNamespace(tp_group=SimpleNamespace(cpu_group=group))

    def flush_cache(empty_cache: bool = True) -> bool:  # scheduler.flush_cache's idle rule
        return state["live"] == 0 or state["mode"] in ("abort", "retract")

    scheduler = _Scheduler()
    updater = wu.SchedulerWeightUpdaterManager(
        tp_worker=_TpWorker(received),
        draft_worker=None,
        memory_saver_adapter=None,
        flush_cache=flush_cache,
        is_fully_idle=lambda **_: state["live"] == 0,
        scheduler=scheduler,
    )
    return updater, scheduler


def replay(records: list[dict], io_struct) -> tuple[list[dict], list, str]:
    received: list = []
    state: dict = {"mode": None, "live": 0}
    updater, scheduler = build_updater(received, state)
    handlers = {
        "/begin_weight_update": (io_struct.BeginWeightUpdateReqInput, updater.begin_weight_update),
        "/end_weight_update": (io_struct.EndWeightUpdateReqInput, updater.end_weight_update),
        "/update_weights_from_distributed": (
            io_struct.UpdateWeightsFromDistributedReqInput,
            updater.update_weights_from_distributed,
        ),
    }
    calls = []
    for record in records:
        path, body = record["path"], record["body"] or {}
        state["live"] = record.get("live", 0)
        if path == "/pause_generation":
            state["mode"] = body.get("mode", "abort")
        elif path == "/continue_generation":
            state["mode"] = None
        elif path in handlers:
            cls, handle = handlers[path]
            out = handle(cls(**body))
            calls.append({"path": path, "success": out.success, "message": out.message})
    return calls, received, scheduler.version


def sglang_spans(answer: dict) -> dict:
    """SGLang's meta_info for the version changes `answer`'s spans report."""
    from sglang.srt.utils.weight_versions import (
        WeightVersionEvent,
        add_weight_versions_to_meta_info,
        compute_weight_version_spans,
    )

    ours = answer["meta_info"]["weight_versions"]
    n = len(answer["meta_info"]["output_token_logprobs"])
    events = [
        WeightVersionEvent(old_version=s["version"], num_output_tokens=s["end"]) for s in ours
    ]
    spans = compute_weight_version_spans(events[:-1], ours[-1]["version"], n)
    meta: dict = {}
    add_weight_versions_to_meta_info(meta, spans, n)
    return meta


def main(argv: list[str]) -> None:
    version, io_struct, _ = import_io_struct()
    with open(argv[1]) as f:
        data = json.load(f)
    calls, received, final = replay(data["requests"], io_struct)
    spans = [
        {"ours": a["meta_info"]["weight_versions"], "sglang": sglang_spans(a)}
        for a in data["answers"]
    ]
    controls = {
        name: replay(records, io_struct)[0] for name, records in data.get("controls", {}).items()
    }
    out = {"sglang": version, "calls": calls, "received": received, "version": final}
    print(json.dumps({**out, "spans": spans, "controls": controls}))


if __name__ == "__main__":
    main(sys.argv)
