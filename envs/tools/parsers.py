"""Tool-call parsers: the model's text -> the calls it made, in the model family's own format.

A parser is a function `(text, tools=None) -> ParsedTurn` (`tools`: the OpenAI-style schemas the
prompt offered; a parser that needs no schemas may take `text` only); `register_parser("name")`
adds one to the registry and `get_parser("name")` finds it (unknown names fail with the list of
known ones). Built in, each checked against SGLang 0.5.23's own detectors on a corpus
(tests/envs/test_tool_call_formats.py; the differences that remain are listed in docs/tools.md):

- `hermes` (Qwen2.5 / Qwen3 / Hermes; SGLang's `qwen25` and `hermes`): any number of
  `<tool_call>\\n{"name": "fn", "arguments": {...}}\\n</tool_call>` blocks in one turn; a block
  may hold a JSON list of calls; `"parameters"` is read as `"arguments"` (as SGLang does);
  `null` arguments are no arguments; a `</tool_call>` inside a JSON string does not end the block.
- `qwen3_coder` (Qwen3-Coder; SGLang's `qwen3_coder`): `<tool_call>\\n<function=fn>\\n
  <parameter=p>\\nvalue\\n</parameter>\\n</function>\\n</tool_call>`, values converted by the
  type the tool's schema gives the parameter, as SGLang converts them.

Reasoning is never acted on: what `split_reasoning` takes as reasoning (SGLang's `qwen3`
reasoning parser's rule: everything up to the first `</think>` of a turn that opened `<think>`,
or up to the first `<tool_call>` when it never closed) is dropped before parsing, so a draft call
written while thinking is not run.

A parser never raises on the model's text: a block it cannot read becomes a `CallError` in the
turn, in order with the good calls, so the env can tell the model what was wrong with which call.
`format_call` writes a call in a format (cold-start references, error messages, docs).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CallError",
    "ParsedTurn",
    "ToolCall",
    "format_call",
    "get_parser",
    "parse_hermes",
    "parse_qwen3_coder",
    "parser_names",
    "register_parser",
    "resolve_tool_format",
    "run_parser",
    "split_reasoning",
]

Schemas = Sequence[Mapping[str, Any]] | None


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallError:
    """A call the parser could not read; `message` is written for the model."""

    message: str


@dataclass(slots=True)
class ParsedTurn:
    items: list[ToolCall | CallError] = field(default_factory=list)
    content: str = ""  # the text outside the tool-call blocks and the reasoning
    reasoning: str = ""  # the reasoning split off before parsing (never parsed for calls)

    @property
    def calls(self) -> list[ToolCall]:
        return [c for c in self.items if isinstance(c, ToolCall)]

    @property
    def errors(self) -> list[CallError]:
        return [c for c in self.items if isinstance(c, CallError)]


Parser = Callable[..., ParsedTurn]
_PARSERS: dict[str, Parser] = {}


def register_parser(name: str) -> Callable[[Parser], Parser]:
    """Decorator: register a parser under `name` (re-registering a name replaces it)."""

    def add(fn: Parser) -> Parser:
        _PARSERS[name] = fn
        return fn

    return add


def get_parser(name: str) -> Parser:
    try:
        return _PARSERS[name]
    except KeyError:
        raise ValueError(
            f"unknown tool-call parser {name!r}; registered: {', '.join(sorted(_PARSERS))} "
            "(add one with envs.tools.register_parser)"
        ) from None


def parser_names() -> list[str]:
    return sorted(_PARSERS)


def run_parser(parser: Parser, text: str, tools: Schemas = None) -> ParsedTurn:
    """Call a parser, passing the schemas only to parsers that take them (users' parsers
    registered before schemas existed take the text alone)."""
    try:
        takes_tools = "tools" in inspect.signature(parser).parameters
    except (TypeError, ValueError):
        takes_tools = False
    return parser(text, tools=tools) if takes_tools else parser(text)


def resolve_tool_format(setting: str, chat_template: str | None) -> str:
    """`rollout.tool_format`: `auto` picks the format the model's chat template teaches
    (Qwen3-Coder's template writes `<function=...>` calls; everything else here is Hermes)."""
    if setting != "auto":
        get_parser(setting)  # an unknown name fails here, listing the known ones
        return setting
    return "qwen3_coder" if chat_template and "<function=" in chat_template else "hermes"


# -- reasoning -------------------------------------------------------------------------------------
_THINK, _END_THINK, _OPEN, _CLOSE = "<think>", "</think>", "<tool_call>", "</tool_call>"


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, answer) of one turn. With `<think>` in the turn, SGLang's qwen3 rule: leading
    `<think>` tags dropped, reasoning up to the first `</think>`; unclosed, up to the first
    `<tool_call>` (Qwen3.5 opens a call without closing its thought), else all of it. Without
    `<think>` but with `</think>` (a template that opens the thought in the prompt) the text
    before `</think>` is reasoning too, where SGLang's default reads it as the answer."""
    if _THINK not in text:
        if _END_THINK in text:
            reasoning, _, answer = text.partition(_END_THINK)
            return reasoning, answer
        return "", text
    body = text
    while body.startswith(_THINK):
        body = body[len(_THINK) :]
    if _END_THINK in body:
        reasoning, _, answer = body.partition(_END_THINK)
        return reasoning, answer
    at = body.find(_OPEN)
    return (body[:at], body[at:]) if at != -1 else (body, "")


# -- hermes / Qwen ---------------------------------------------------------------------------------
_JSON = json.JSONDecoder()


@register_parser("hermes")
def parse_hermes(text: str, tools: Schemas = None) -> ParsedTurn:
    reasoning, answer = split_reasoning(text)
    turn = ParsedTurn(reasoning=reasoning)
    pieces: list[str] = []
    pos = 0
    while (start := answer.find(_OPEN, pos)) != -1:
        pieces.append(answer[pos:start])
        body_at = start + len(_OPEN)
        items, end = _read_block(answer, body_at)
        turn.items.extend(items)
        if end is None:  # never closed: the turn hit its token limit, or a tag is missing
            break
        pos = end
    else:
        pieces.append(answer[pos:])
    turn.content = "".join(pieces).strip()
    return turn


def _read_block(text: str, at: int) -> tuple[list[ToolCall | CallError], int | None]:
    """The calls of the block whose body starts at `at`, and where the block ends (None: open)."""
    value_at = _skip_space(text, at)
    try:
        value, after = _JSON.raw_decode(text, value_at)
    except json.JSONDecodeError as exc:
        close = text.find(_CLOSE, at)
        body = text[at:] if close == -1 else text[at:close]
        if close == -1:
            return [
                CallError(f"a {_OPEN} block was not closed with {_CLOSE}: {_clip(body)!r}")
            ], None
        return [
            CallError(f"the tool call is not valid JSON ({exc.msg}): {_clip(body)!r}")
        ], close + len(_CLOSE)
    close_at = _skip_space(text, after)
    if not text.startswith(_CLOSE, close_at):
        close = text.find(_CLOSE, after)
        if close == -1:
            return [
                CallError(f"a {_OPEN} block was not closed with {_CLOSE}: {_clip(text[at:])!r}")
            ], None
        return [
            CallError(f"text after the JSON of a tool call: {_clip(text[after:close])!r}")
        ], close + len(_CLOSE)
    calls = value if isinstance(value, list) else [value]
    return [_read_call(obj) for obj in calls], close_at + len(_CLOSE)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _read_call(obj: Any) -> ToolCall | CallError:
    if not isinstance(obj, dict):
        return CallError(
            'a tool call must be a JSON object {"name": ..., "arguments": {...}}, got '
            f"{_clip(json.dumps(obj))!r}"
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return CallError(f'the tool call has no "name" string: {_clip(json.dumps(obj))!r}')
    # SGLang's rule: a truthy "parameters" wins, else "arguments"; null is no arguments
    arguments = obj.get("parameters") or obj.get("arguments")
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):  # some models send the arguments JSON-encoded
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return CallError(f'{name}: "arguments" is a string that is not a JSON object')
    if not isinstance(arguments, dict):
        return CallError(
            f'{name}: "arguments" must be a JSON object of named arguments, got '
            f"{_clip(json.dumps(arguments))!r}"
        )
    return ToolCall(name, arguments)


def _clip(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


# -- Qwen3-Coder XML -------------------------------------------------------------------------------
_FUNCTION, _END_FUNCTION = "<function=", "</function>"
_PARAMETER, _END_PARAMETER = "<parameter=", "</parameter>"
_XML_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@register_parser("qwen3_coder")
def parse_qwen3_coder(text: str, tools: Schemas = None) -> ParsedTurn:
    reasoning, answer = split_reasoning(text)
    turn = ParsedTurn(reasoning=reasoning, content=answer.strip())
    if _OPEN not in answer:
        return turn
    properties = _properties(tools)
    blocks = list(_XML_BLOCK.finditer(answer))
    if not blocks:  # one block left open (or its tags mangled): SGLang reads the whole turn
        turn.content = answer[: answer.find(_OPEN)].strip()
        turn.items = _xml_calls(answer, properties) or [
            CallError(f"a {_OPEN} block was not closed with {_CLOSE}: {_clip(answer)!r}")
        ]
        return turn
    pieces, pos = [], 0
    for block in blocks:
        pieces.append(answer[pos : block.start()])
        found = _xml_calls(block.group(1), properties)
        turn.items.extend(found or [CallError(f"a {_OPEN} block without a {_FUNCTION}name> call")])
        pos = block.end()
    tail = answer[pos:]
    if _OPEN in tail:
        head, _, body = tail.partition(_OPEN)
        pieces.append(head)
        turn.items.append(
            CallError(f"a {_OPEN} block was not closed with {_CLOSE}: {_clip(body)!r}")
        )
    else:
        pieces.append(tail)
    turn.content = "".join(pieces).strip()
    return turn


def _xml_calls(body: str, properties: dict[str, dict[str, Any]]) -> list[ToolCall | CallError]:
    items: list[ToolCall | CallError] = []
    for chunk in body.split(_FUNCTION)[1:]:
        chunk = chunk.split(_END_FUNCTION, 1)[0]
        if ">" not in chunk:
            items.append(CallError(f"a {_FUNCTION} tag without its closing '>': {_clip(chunk)!r}"))
            continue
        name, params = chunk.split(">", 1)
        schema = properties.get(name, {})
        arguments: dict[str, Any] = {}
        for key, raw in _xml_parameters(params):
            arguments[key] = _convert(raw, schema.get(key))
        items.append(ToolCall(name, arguments))
    return items


def _xml_parameters(params: str) -> list[tuple[str, str]]:
    """(name, raw value) pairs; a value ends at `</parameter>`, the next `<parameter=` or the end
    (SGLang's rule), with one leading and one trailing newline removed."""
    out = []
    for chunk in params.split(_PARAMETER)[1:]:
        if ">" not in chunk:
            continue
        name, value = chunk.split(">", 1)
        value = value.split(_END_PARAMETER, 1)[0]
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        out.append((name, value))
    return out


def _properties(tools: Schemas) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for schema in tools or ():
        function = schema.get("function", schema)
        params = function.get("parameters") or {}
        props = params.get("properties", params) if isinstance(params, dict) else {}
        if function.get("name"):
            out[function["name"]] = props if isinstance(props, dict) else {}
    return out


_INTS = ("int", "uint", "long", "short", "unsigned")


def _convert(raw: str, prop: Any) -> Any:
    """A parameter's text as the type its schema declares, as SGLang 0.5.23 converts it: a value
    that does not convert stays text (the tool's own argument check then reports it)."""
    if raw.lower() == "null":
        return None
    kind = str(prop.get("type", "string")).strip().lower() if isinstance(prop, dict) else None
    if kind is None or kind in ("string", "str", "text", "varchar", "char", "enum"):
        return raw
    if kind.startswith(_INTS):
        try:
            return int(raw)
        except ValueError:
            return raw
    if kind.startswith(("num", "float")):
        try:
            number = float(raw)
        except ValueError:
            return raw
        whole = "." not in raw and "e" not in raw.lower()
        return int(number) if whole and number.is_integer() else number
    if kind in ("boolean", "bool", "binary"):
        return raw.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


# -- writing calls ---------------------------------------------------------------------------------
def format_call(name: str, arguments: Mapping[str, Any], tool_format: str = "hermes") -> str:
    """One call as the format writes it (as Qwen3's / Qwen3-Coder's chat templates render a call)."""
    if tool_format == "qwen3_coder":
        params = "".join(
            f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n"
            "</parameter>\n"
            for key, value in arguments.items()
        )
        return f"{_OPEN}\n{_FUNCTION}{name}>\n{params}{_END_FUNCTION}\n{_CLOSE}"
    if tool_format != "hermes":
        raise ValueError(f"format_call: unknown tool format {tool_format!r} (hermes, qwen3_coder)")
    return f"{_OPEN}\n{json.dumps({'name': name, 'arguments': dict(arguments)})}\n{_CLOSE}"
