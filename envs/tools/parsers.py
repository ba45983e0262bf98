"""Tool-call parsers: the model's text -> the calls it made, in the model family's own format.

A parser is a function `text -> ParsedTurn`; `register_parser("name")` adds one to the registry
and `get_parser("name")` finds it (unknown names fail with the list of known ones). Built in:

- `hermes` (Qwen2.5 / Qwen3 / Hermes): any number of
  `<tool_call>\\n{"name": "fn", "arguments": {...}}\\n</tool_call>` blocks in one turn.

A parser never raises on the model's text: a block it cannot read becomes a `CallError` in the
turn, in order with the good calls, so the env can tell the model what was wrong with which call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CallError",
    "ParsedTurn",
    "ToolCall",
    "get_parser",
    "parse_hermes",
    "parser_names",
    "register_parser",
]


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
    content: str = ""  # the text outside the tool-call blocks

    @property
    def calls(self) -> list[ToolCall]:
        return [c for c in self.items if isinstance(c, ToolCall)]

    @property
    def errors(self) -> list[CallError]:
        return [c for c in self.items if isinstance(c, CallError)]


Parser = Callable[[str], ParsedTurn]
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


# -- hermes / Qwen ---------------------------------------------------------------------------------
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@register_parser("hermes")
def parse_hermes(text: str) -> ParsedTurn:
    turn = ParsedTurn()
    pieces: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        pieces.append(text[pos : match.start()])
        turn.items.append(_read_call(match.group(1)))
        pos = match.end()
    tail = text[pos:]
    if _OPEN in tail:  # a block left open (the turn hit its token limit, or a missing tag)
        head, _, body = tail.partition(_OPEN)
        pieces.append(head)
        turn.items.append(
            CallError(f"a {_OPEN} block was not closed with {_CLOSE}: {_clip(body)!r}")
        )
    else:
        pieces.append(tail)
    turn.content = "".join(pieces).strip()
    return turn


def _read_call(body: str) -> ToolCall | CallError:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return CallError(
            f"the tool call is not valid JSON ({exc.msg} at char {exc.pos}): {_clip(body)!r}"
        )
    if not isinstance(obj, dict):
        return CallError(
            f'a tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, got {_clip(body)!r}'
        )
    name, arguments = obj.get("name"), obj.get("arguments", {})
    if not isinstance(name, str) or not name:
        return CallError(f'the tool call has no "name" string: {_clip(body)!r}')
    if isinstance(arguments, str):  # some models send the arguments JSON-encoded
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return CallError(f'{name}: "arguments" is a string that is not a JSON object')
    if not isinstance(arguments, dict):
        return CallError(
            f'{name}: "arguments" must be a JSON object, got {_clip(json.dumps(arguments))!r}'
        )
    return ToolCall(name, arguments)


def _clip(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."
