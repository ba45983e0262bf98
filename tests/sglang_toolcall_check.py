"""Parse model outputs with SGLang 0.5.23's own detectors (run as a subprocess).

    python tests/sglang_toolcall_check.py CORPUS.json

CORPUS.json: {"tools": [OpenAI tool schemas], "samples": [{"format": "qwen25" | "hermes" |
"qwen3_coder", "text": ...}]}. Each text goes through what SGLang's chat endpoint runs with
`--reasoning-parser qwen3 --tool-call-parser FORMAT`: the qwen3 reasoning detector's one-shot
`detect_and_parse` (the reasoning is set aside), then the tool-call detector's on the rest.
Prints one JSON object: {"sglang": version, "calls": [[[name, arguments], ...] per sample]}.

Run with the pinned sglang on PYTHONPATH (scripts/setup_sglang_conformance.sh), in its own
process so its imports stay out of the test session.
"""

from __future__ import annotations

import json
import logging
import sys


def main() -> None:
    logging.disable(logging.WARNING)  # the detectors log every call they drop
    import sglang
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.hermes_detector import HermesDetector
    from sglang.srt.function_call.qwen3_coder_detector import Qwen3CoderDetector
    from sglang.srt.function_call.qwen25_detector import Qwen25Detector
    from sglang.srt.parser.reasoning_parser import Qwen3Detector

    corpus = json.loads(open(sys.argv[1]).read())
    tools = [Tool(**schema) for schema in corpus["tools"]]
    detectors = {
        "qwen25": Qwen25Detector,
        "hermes": HermesDetector,
        "qwen3_coder": Qwen3CoderDetector,
    }
    out = []
    for sample in corpus["samples"]:
        answer = Qwen3Detector().detect_and_parse(sample["text"]).normal_text
        result = detectors[sample["format"]]().detect_and_parse(answer, tools)
        out.append([[c.name, json.loads(c.parameters)] for c in result.calls])
    print(json.dumps({"sglang": sglang.__version__, "calls": out}))


if __name__ == "__main__":
    main()
