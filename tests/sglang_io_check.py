"""Validate recorded request bodies with SGLang's own request classes (run as a subprocess).

    python tests/sglang_io_check.py BODIES.json VOCAB_SIZE

BODIES.json is a list of {"path": "/generate", "body": {...} | null}. Prints one JSON object:
{"sglang": version, "checked": {path: count}, "errors": [...]}. Exit status 0 even with errors;
the caller asserts on them.

Run in its own process, with a pinned sglang (and the few packages its import chain needs, see
requirements/sglang-conformance.txt) on PYTHONPATH, because two things here must not leak into
a test session: sglang's imports, and the placeholder for torchvision. sglang's model-config
modules import torchvision at import time; the PyPI torchvision wheels are CUDA builds that do not
load against the CPU torch, and no request class uses it. So before importing sglang we make
transformers record "no torchvision" (its availability check is cached), then let `import
torchvision...` resolve to inert placeholder modules.

Each body is checked three ways, each stricter than the last:
1. as SGLang's HTTP server parses it (FastAPI -> pydantic over the class, extra keys ignored);
2. by constructing the class with the body as keywords, so a misspelt key fails instead of being
   silently ignored, as `GenerateReqInput(**body).normalize_batch_and_arguments()` does;
3. for /generate, sampling_params as the tokenizer manager builds them:
   SamplingParams(**params), normalize, verify(vocab_size).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import traceback
import types
from collections import Counter


class _Placeholders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import torchvision[.x]` -> an empty module whose attributes are inert classes."""

    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def placeholder(attr: str):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (), {})

        module.__getattr__ = placeholder  # type: ignore[method-assign]
        return module

    def exec_module(self, module) -> None:
        return None


def import_io_struct():
    try:
        import torchvision  # noqa: F401  (a working one: nothing to do)
    except Exception:
        from transformers.utils import import_utils

        import_utils.is_torchvision_available()  # cache "absent" before the placeholder exists
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Placeholders())
    import sglang
    from sglang.srt.managers import io_struct
    from sglang.srt.sampling.sampling_params import SamplingParams

    return sglang.__version__, io_struct, SamplingParams


def check(path: str, body, io_struct, sampling_cls, vocab_size: int) -> None:
    import pydantic

    classes = {
        "/generate": io_struct.GenerateReqInput,
        "/abort_request": io_struct.AbortReq,
        "/pause_generation": io_struct.PauseGenerationReqInput,
        "/continue_generation": io_struct.ContinueGenerationReqInput,
        "/update_weights_from_disk": io_struct.UpdateWeightFromDiskReqInput,
        "/init_weights_update_group": io_struct.InitWeightsUpdateGroupReqInput,
        "/update_weights_from_distributed": io_struct.UpdateWeightsFromDistributedReqInput,
        "/begin_weight_update": io_struct.BeginWeightUpdateReqInput,
        "/end_weight_update": io_struct.EndWeightUpdateReqInput,
        "/destroy_weights_update_group": io_struct.DestroyWeightsUpdateGroupReqInput,
    }
    if path == "/flush_cache":  # SGLang takes no body there (only a `timeout` query parameter)
        if body:
            raise ValueError(f"/flush_cache takes no body, got {body!r}")
        return
    if path not in classes:
        raise ValueError(f"no SGLang request class known for {path}")
    cls = classes[path]
    pydantic.TypeAdapter(cls).validate_python(body)
    obj = cls(**body)
    if path == "/generate":
        obj.normalize_batch_and_arguments()
        params = sampling_cls(**body["sampling_params"])
        params.normalize(None)
        params.verify(vocab_size)


def main(argv: list[str]) -> None:
    bodies_path, vocab_size = argv[1], int(argv[2])
    version, io_struct, sampling_cls = import_io_struct()
    with open(bodies_path) as f:
        records = json.load(f)
    checked: Counter[str] = Counter()
    errors = []
    for record in records:
        try:
            check(record["path"], record["body"], io_struct, sampling_cls, vocab_size)
            checked[record["path"]] += 1
        except Exception as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            errors.append({"path": record["path"], "body": record["body"], "error": last})
    print(json.dumps({"sglang": version, "checked": dict(checked), "errors": errors}))


if __name__ == "__main__":
    main(sys.argv)
