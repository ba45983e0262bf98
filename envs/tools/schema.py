"""Tools as typed Python callables: OpenAI function-format schemas from signatures and docstrings,
and validation of a model's arguments against the same signature.

    def read_file(path: str, max_lines: int = 200) -> str:
        '''Read a file of the workspace.

        Args:
            path: the file, relative to the repository root.
            max_lines: at most this many lines are returned.
        '''

    tool_schema(read_file) ==
    {"type": "function", "function": {"name": "read_file",
      "description": "Read a file of the workspace.",
      "parameters": {"type": "object", "properties": {
          "path": {"type": "string", "description": "the file, relative to the repository root."},
          "max_lines": {"type": "integer", "description": "at most this many lines are returned."}},
        "required": ["path"]}}}

Supported annotations: str, int, float, bool, list[X], dict[str, X], Literal[...], X | None.
A parameter without an annotation, or with one not listed, is refused when the tool is declared,
not when the model first calls it. Argument errors are returned as `ArgumentError` with a message
written for the model (it sees it as the tool's result).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ArgumentError", "Tool", "tool_schema"]

_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_SECTION = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


class ArgumentError(ValueError):
    """The model's arguments do not fit the tool's signature; the message is for the model."""


@dataclass(frozen=True, slots=True)
class Tool:
    """One callable tool: its name, the callable (sync or async) and its JSON schema."""

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    is_async: bool

    @classmethod
    def from_callable(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        schema = tool_schema(fn, name=name)
        target = getattr(fn, "__func__", fn)
        return cls(schema["function"]["name"], fn, schema, inspect.iscoroutinefunction(target))

    def bind(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments checked against the signature (types, unknown and missing names)."""
        return bind_arguments(self.fn, self.schema, arguments)


def tool_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """The OpenAI function-format schema of `fn` (a function or a bound method)."""
    name = name or fn.__name__
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", name):
        raise ValueError(f"tool name {name!r} must match [A-Za-z_][A-Za-z0-9_-]{{0,63}}")
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    hints = _type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args / **kwargs cannot be described to a model")
        if param.name not in hints:
            raise TypeError(
                f"tool {name!r}: parameter {param.name!r} has no type annotation; annotate it "
                "(str, int, float, bool, list[...], dict[str, ...], Literal[...], X | None)"
            )
        prop = _json_type(hints[param.name], f"tool {name!r} parameter {param.name!r}")
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    function: dict[str, Any] = {"name": name, "description": summary or name}
    function["parameters"] = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": function}


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target = getattr(fn, "__func__", fn)
    try:
        hints = typing.get_type_hints(target)
    except Exception as exc:  # a forward reference that does not resolve
        raise TypeError(f"tool {fn.__name__!r}: cannot resolve its annotations ({exc})") from exc
    hints.pop("return", None)
    return hints


def _json_type(annotation: Any, where: str) -> dict[str, Any]:
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        kinds = {type(a) for a in args}
        if len(kinds) != 1 or next(iter(kinds)) not in _SCALARS:
            raise TypeError(f"{where}: Literal values must share one of str/int/float/bool")
        return {"type": _SCALARS[next(iter(kinds))], "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return _json_type(rest[0], where)  # optional: the default says it may be left out
    if origin is list or annotation is list:
        item = args[0] if args else None
        return {"type": "array", **({"items": _json_type(item, where)} if item else {})}
    if origin is dict or annotation is dict:
        if args and args[0] is not str:
            raise TypeError(f"{where}: dict keys must be str (JSON objects)")
        value = args[1] if len(args) == 2 else None
        extra = {"additionalProperties": _json_type(value, where)} if value else {}
        return {"type": "object", **extra}
    raise TypeError(
        f"{where}: annotation {annotation!r} has no JSON schema here; use str, int, float, bool, "
        "list[...], dict[str, ...], Literal[...] or X | None"
    )


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph, {argument: description}) of a Google-style docstring."""
    lines = doc.splitlines()
    summary_lines: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        summary_lines.append(line.strip())
    args: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if not in_args:
            continue
        if _SECTION.match(line):
            break
        match = _ARG_LINE.match(line)
        if match and (current is None or _indent(line) <= _indent_of_args(lines, current)):
            current = match.group(1).lstrip("*")
            args[current] = match.group(3).strip()
        elif current is not None and line.strip():
            args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(summary_lines), args


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _indent_of_args(lines: list[str], name: str) -> int:
    for line in lines:
        match = _ARG_LINE.match(line)
        if match and match.group(1).lstrip("*") == name:
            return _indent(line)
    return 0


# -- validation of a call -------------------------------------------------------------------------


def bind_arguments(
    fn: Callable[..., Any], schema: dict[str, Any], arguments: dict[str, Any]
) -> dict[str, Any]:
    """`arguments` checked against the schema; raises ArgumentError naming the problem."""
    params = schema["function"]["parameters"]
    props: dict[str, Any] = params["properties"]
    name = schema["function"]["name"]
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        raise ArgumentError(
            f"{name}() got unknown argument(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(props) or 'no arguments'}"
        )
    missing = [p for p in params["required"] if p not in arguments]
    if missing:
        raise ArgumentError(f"{name}() is missing required argument(s) {', '.join(missing)}")
    bound: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None and key not in params["required"]:
            continue  # null for an optional argument: its default applies
        problem = _type_problem(value, props[key])
        if problem:
            raise ArgumentError(f"{name}() argument {key!r}: {problem}")
        bound[key] = float(value) if props[key].get("type") == "number" else value
    return bound


def _type_problem(value: Any, prop: dict[str, Any]) -> str | None:
    kind = prop.get("type")
    if value is None:
        return f"expected {kind}, got null"
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if kind in checks and not checks[kind](value):
        return f"expected {kind}, got {_json_kind(value)} {str(value)[:40]!r}"
    if "enum" in prop and value not in prop["enum"]:
        return f"must be one of {prop['enum']}, got {value!r}"
    if kind == "array" and "items" in prop:
        for item in value:
            problem = _type_problem(item, prop["items"])
            if problem:
                return f"an item: {problem}"
    return None


def _json_kind(value: Any) -> str:
    for kind, py in (("boolean", bool), ("integer", int), ("number", float), ("string", str)):
        if isinstance(value, py):
            return kind
    if isinstance(value, list | dict):
        return "array" if isinstance(value, list) else "object"
    return type(value).__name__
