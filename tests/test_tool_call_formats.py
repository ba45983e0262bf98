"""Tool-call parsing agrees with SGLang 0.5.23's own detectors on a corpus of model outputs.

A seeded corpus of 160 Hermes/Qwen outputs and 140 Qwen3-Coder outputs, composed from the cases
models write (one or several calls, lists of calls in one block, `parameters` for `arguments`,
null arguments, a `</tool_call>` inside a string, typed XML parameters, multi-line code, missing
closing tags, truncated turns, prose around the calls, reasoning with draft calls, bad JSON,
unknown tools), goes through our parser and, in a subprocess, through what SGLang's chat endpoint
runs with `--reasoning-parser qwen3 --tool-call-parser qwen25|qwen3_coder`
(tests/sglang_toolcall_check.py). The calls must be equal on every sample, except the kinds
listed in DIVERGES, where we differ on purpose (docs/agents.md says why); the test checks that
those really differ, so the list stays true.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_dir import conformance_dir

from envs.tools.parsers import (
    format_call,
    parse_hermes,
    parse_qwen3_coder,
    resolve_tool_format,
    split_reasoning,
)

CHECKER = Path(__file__).with_name("sglang_toolcall_check.py")


def _schema(name: str, **props: str) -> dict:
    properties = {k: {"type": v} for k, v in props.items()}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


TOOLS = [
    _schema("bash", cmd="string"),
    _schema("read_file", path="string", max_lines="integer"),
    _schema("python", code="string"),
    _schema(
        "search",
        query="string",
        limit="integer",
        exact="boolean",
        weight="number",
        paths="array",
        options="object",
    ),  # fmt: skip
    _schema("submit"),
]
KNOWN = {t["function"]["name"] for t in TOOLS}

# kinds where we differ from SGLang on purpose (docs/agents.md, "Tool-call formats")
DIVERGES = {
    "tight": "qwen25 needs a newline after <tool_call> and before </tool_call>; we take any spacing",
    "string_args": "arguments sent as a JSON-encoded string: we decode it, SGLang passes the string",
    "array_args": "arguments that are a JSON array: SGLang passes the list on, we reject the call",
    "prompt_think": "a </think> without <think> (a template that opens the thought in the prompt): "
    "we drop the text before it as reasoning, SGLang's default qwen3 parser reads it as the answer",
}

CODE = 'def f(x):\n    return "<b>" + str(x)  # a > b\n\nprint(f(1))'

HERMES_CALLS: list[tuple[object, set[str]]] = [  # (the block's JSON value or raw body, kinds)
    ({"name": "bash", "arguments": {"cmd": "ls -la"}}, set()),
    ({"name": "read_file", "arguments": {"path": "src/app.py", "max_lines": 40}}, set()),
    ({"name": "python", "arguments": {"code": CODE}}, set()),
    ({"name": "bash", "arguments": {"cmd": "echo '</tool_call>' && echo done"}}, set()),
    ({"name": "bash", "arguments": {"cmd": "grep -n '<tool_call>' log.txt"}}, set()),
    ({"name": "read_file", "parameters": {"path": "README.md"}}, set()),
    ({"name": "submit", "arguments": None}, set()),
    ({"name": "submit", "arguments": {}}, set()),
    ({"name": "submit"}, set()),
    ({"name": "bash", "arguments": {"cmd": "echo héllo ✓ 日本"}}, set()),
    ({"name": "search", "arguments": {"query": "x", "paths": ["a", "b"], "options": {"k": 1}}}, set()),
    ({"name": "bash", "parameters": {"cmd": "pwd"}, "arguments": {"cmd": "ls"}}, set()),
    ({"name": "bash", "parameters": {}, "arguments": {"cmd": "ls"}}, set()),
    ([{"name": "bash", "arguments": {"cmd": "ls"}}, {"name": "read_file", "arguments": {"path": "a"}}], set()),
    ({"name": "delete_everything", "arguments": {"path": "/"}}, set()),
    ({"arguments": {"cmd": "ls"}}, set()),
    ('{"name": "bash", "arguments": {"cmd": "ls"}', set()),  # bad JSON: one brace short
    ('{"name": "bash", "arguments": {"cmd": "ls"}} and more', set()),
    ({"name": "bash", "arguments": json.dumps({"cmd": "ls"})}, {"string_args"}),
    ({"name": "bash", "arguments": ["ls", "-la"]}, {"array_args"}),
]  # fmt: skip

XML_CALLS: list[tuple[str, set[str]]] = [  # (the block's body, kinds)
    ("<function=bash>\n<parameter=cmd>\nls -la\n</parameter>\n</function>", set()),
    ("<function=read_file>\n<parameter=path>\nsrc/app.py\n</parameter>\n<parameter=max_lines>\n40\n"
     "</parameter>\n</function>", set()),
    (f"<function=python>\n<parameter=code>\n{CODE}\n</parameter>\n</function>", set()),
    ("<function=search>\n<parameter=query>\nfoo bar\n</parameter>\n<parameter=limit>\n5\n</parameter>\n"
     "<parameter=exact>\ntrue\n</parameter>\n<parameter=weight>\n0.5\n</parameter>\n<parameter=paths>\n"
     '["a", "b"]\n</parameter>\n<parameter=options>\n{"k": 1}\n</parameter>\n</function>', set()),
    ("<function=search>\n<parameter=limit>\nfive\n</parameter>\n<parameter=weight>\n2\n</parameter>\n"
     "<parameter=exact>\nFalse\n</parameter>\n</function>", set()),
    ("<function=search>\n<parameter=paths>\n['a', 'b']\n</parameter>\n<parameter=options>\nnull\n"
     "</parameter>\n</function>", set()),
    ("<function=read_file>\n<parameter=path>\na.py\n<parameter=max_lines>\n3\n</function>", set()),
    ("<function=bash>\n<parameter=cmd>\necho hi\n</parameter>\n", set()),
    ("<function=bash>\n<parameter=extra>\nvalue\n</parameter>\n</function>", set()),
    ("<function=submit>\n</function>", set()),
    ("<function=unknown_tool>\n<parameter=x>\n1\n</parameter>\n</function>", set()),
    ("<function=bash>\n<parameter=cmd>\nprintf 'a > b < c'\n</parameter>\n</function>", set()),
    ("<function=bash>\n<parameter=cmd>\nls\n</parameter>\n</function>\n<function=read_file>\n"
     "<parameter=path>\nb\n</parameter>\n</function>", set()),
]  # fmt: skip

PROSE = ["", "Let me look at the files first.\n", "I'll run it.\n\n", "Step 2: edit.\n"]
TAILS = ["", "\n", "\nThat should do it.", '\n<tool_call>\n{"name": "bash", "argu']


def _hermes_block(value: object, tight: bool) -> str:
    body = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"<tool_call>{body}</tool_call>" if tight else f"<tool_call>\n{body}\n</tool_call>"


def _think(rng: random.Random, draft: str) -> tuple[str, set[str]]:
    choice = rng.randrange(6)
    if choice == 0:
        return "<think>\nI should check the tests first.\n</think>\n\n", set()
    if choice == 1:  # a draft call while thinking: never run
        return f"<think>\nMaybe:\n{draft}\nno, first look.\n</think>\n\n", set()
    if choice == 2:  # the template opened the thought in the prompt
        return f"Maybe {draft} first.\n</think>\n\n", {"prompt_think"}
    if choice == 3:  # a thought never closed: SGLang ends it at the first <tool_call>
        return "<think>\nThe bug is in parse(); call the tool.\n", set()
    return "", set()


def hermes_corpus(n: int = 160) -> list[dict]:
    rng, out = random.Random(20261202), []
    for i in range(n):
        picks = [HERMES_CALLS[(i + k * 7) % len(HERMES_CALLS)] for k in range(1 + i % 3)]
        tight = i % 11 == 5
        kinds = set().union(*(k for _, k in picks)) | ({"tight"} if tight else set())
        head, think_kinds = _think(
            rng, _hermes_block({"name": "bash", "arguments": {"cmd": "rm x"}}, False)
        )
        blocks = "\n".join(_hermes_block(v, tight) for v, _ in picks)
        text = head + rng.choice(PROSE) + blocks + rng.choice(TAILS)
        out.append({"format": "qwen25", "text": text, "kinds": sorted(kinds | think_kinds)})
    return out


def xml_corpus(n: int = 140) -> list[dict]:
    rng, out = random.Random(7), []
    for i in range(n):
        picks = [XML_CALLS[(i + k * 5) % len(XML_CALLS)] for k in range(1 + i % 3)]
        kinds = set().union(*(k for _, k in picks))
        draft = "<tool_call>\n<function=bash>\n<parameter=cmd>\nrm x\n</parameter>\n</function>\n</tool_call>"
        head, think_kinds = _think(rng, draft)
        blocks = "\n".join(f"<tool_call>\n{body}\n</tool_call>" for body, _ in picks)
        if i % 13 == 4:  # the turn's only block left open (hit the token limit after a call)
            blocks = f"<tool_call>\n{picks[0][0]}"
        tail = rng.choice(["", "\n", "\nDone.", "\n<tool_call>\n<function=bash>\n<parameter=cm"])
        text = head + rng.choice(PROSE) + blocks + tail
        out.append({"format": "qwen3_coder", "text": text, "kinds": sorted(kinds | think_kinds)})
    return out


def ours(sample: dict) -> list[list]:
    if sample["format"] == "qwen3_coder":
        turn = parse_qwen3_coder(sample["text"], tools=TOOLS)
        return [[c.name, c.arguments] for c in turn.calls]
    turn = parse_hermes(sample["text"], tools=TOOLS)
    return [[c.name, c.arguments] for c in turn.calls if c.name in KNOWN]  # SGLang drops unknowns


def sglang_calls(samples: list[dict], tmp_path: Path) -> list[list[list]]:
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"tools": TOOLS, "samples": samples}))
    env = {**os.environ, "PYTHONPATH": str(conformance_dir())}
    proc = subprocess.run(
        [sys.executable, str(CHECKER), str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sglang"] == "0.5.23"
    return result["calls"]


@pytest.mark.parametrize("corpus", [hermes_corpus, xml_corpus], ids=["hermes", "qwen3_coder"])
def test_calls_agree_with_sglang_detectors_except_the_documented_kinds(corpus, tmp_path):
    samples = corpus()
    assert len(samples) >= 100
    theirs = sglang_calls(samples, tmp_path)
    agree, differ, unexpected = 0, {}, []
    for sample, their in zip(samples, theirs, strict=True):
        mine = ours(sample)
        their = [[name, {} if args is None else args] for name, args in their]  # null: no arguments
        divergent = set(sample["kinds"]) & set(DIVERGES)
        if mine == their:
            agree += 1
        elif divergent:
            differ.setdefault(",".join(sorted(divergent)), []).append(sample["text"])
        else:
            unexpected.append({"text": sample["text"], "ours": mine, "sglang": their})
    print(f"{corpus.__name__}: {agree}/{len(samples)} agree; differ on purpose: "
          + json.dumps({k: len(v) for k, v in differ.items()}))  # fmt: skip
    assert not unexpected, f"{len(unexpected)} differ: " + json.dumps(
        unexpected[:3], ensure_ascii=False
    )
    assert agree >= 0.6 * len(samples)  # the corpus is mostly of the kinds we agree on


def test_each_documented_divergence_is_real(tmp_path):
    cases = {
        "tight": ("qwen25", '<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>'),
        "string_args": ("qwen25", _hermes_block({"name": "bash", "arguments": '{"cmd": "ls"}'}, False)),
        "array_args": ("qwen25", _hermes_block({"name": "bash", "arguments": ["ls"]}, False)),
        "prompt_think": ("qwen25", "x " + _hermes_block({"name": "bash", "arguments": {"cmd": "rm"}}, False)
                         + "\n</think>\n\n" + _hermes_block({"name": "submit", "arguments": {}}, False)),
    }  # fmt: skip
    assert set(cases) == set(DIVERGES)
    samples = [{"format": f, "text": t} for f, t in cases.values()]
    for (kind, sample), theirs in zip(cases.items(), sglang_calls(samples, tmp_path), strict=True):
        assert ours({"format": sample[0], "text": sample[1]}) != theirs, kind


def test_draft_calls_inside_think_are_never_run():
    draft = _hermes_block({"name": "bash", "arguments": {"cmd": "rm -rf /"}}, False)
    final = _hermes_block({"name": "submit", "arguments": {}}, False)
    turn = parse_hermes(f"<think>\nmaybe {draft}\n</think>\n\n{final}")
    assert [c.name for c in turn.calls] == ["submit"]
    assert "rm -rf" in turn.reasoning and "rm -rf" not in turn.content
    only_thought = parse_hermes(f"<think>\n{draft}")  # unclosed: SGLang ends it at <tool_call>
    assert [c.name for c in only_thought.calls] == ["bash"]
    assert split_reasoning("no thinking here") == ("", "no thinking here")


def test_a_closing_tag_inside_a_string_does_not_cut_the_call():
    text = _hermes_block({"name": "bash", "arguments": {"cmd": "echo '</tool_call>'; ls"}}, False)
    assert parse_hermes(text).calls[0].arguments == {"cmd": "echo '</tool_call>'; ls"}
    assert not parse_hermes(text).errors


def test_xml_values_follow_the_schema_types():
    text = "<tool_call>\n" + XML_CALLS[3][0] + "\n</tool_call>"
    (call,) = parse_qwen3_coder(text, tools=TOOLS).calls
    assert call.arguments == {
        "query": "foo bar", "limit": 5, "exact": True, "weight": 0.5,
        "paths": ["a", "b"], "options": {"k": 1},
    }  # fmt: skip
    untyped = parse_qwen3_coder(text).calls[0].arguments  # no schemas: every value is text
    assert untyped["limit"] == "5" and untyped["paths"] == '["a", "b"]'


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_a_formatted_call_parses_back_to_itself(fmt):
    arguments = {"path": "src/a b.py", "max_lines": 12}
    text = "Reading it.\n" + format_call("read_file", arguments, fmt)
    parse = parse_qwen3_coder if fmt == "qwen3_coder" else parse_hermes
    (call,) = parse(text, tools=TOOLS).calls
    assert (call.name, call.arguments) == ("read_file", arguments)


def test_auto_format_follows_the_chat_template():
    assert resolve_tool_format("auto", "{{ '<function=' ~ name ~ '>' }}") == "qwen3_coder"
    assert resolve_tool_format("auto", "{{ '<tool_call>' }}") == "hermes"
    assert resolve_tool_format("auto", None) == "hermes"
    assert resolve_tool_format("qwen3_coder", None) == "qwen3_coder"
    with pytest.raises(ValueError, match="registered: .*hermes.*qwen3_coder"):
        resolve_tool_format("qwen3-coder", None)
