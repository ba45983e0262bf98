"""Procedural bug injection in the style of SWE-smith's procedural modifiers: small AST edits.

Each `Mutation` replaces exactly one single-line expression or statement of a module with a
changed version, so the diff is one hunk and the rest of the file stays byte-for-byte. Kinds:
  flip_compare   a comparison operator swapped for its neighbour (< vs <=, == vs !=, in vs not in)
  off_by_one     an integer literal in an index, slice, range() or comparison moved by one
  swap_operands  the operands of a non-commutative binary operation swapped
  flip_binop     + vs -, * vs //, and vs or
  drop_branch    the body of an `if` without `else` replaced by `pass`
A mutation is only a candidate: make_set.py keeps it when the project's own tests catch it and
gold validation passes.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Mutation", "mutations"]

_FLIP_CMP: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_FLIP_BIN: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv}
_NONCOMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift)


@dataclass(frozen=True, slots=True)
class Mutation:
    kind: str
    function: str  # the enclosing function ("" at module level)
    lineno: int
    old_line: str
    new_line: str

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        assert lines[self.lineno - 1] == self.old_line
        lines[self.lineno - 1] = self.new_line
        return "".join(lines)


def mutations(source: str, *, seed: int = 0, limit: int = 50) -> list[Mutation]:
    """Up to `limit` distinct candidate mutations of `source`, in a seeded random order."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found: dict[tuple[int, str], Mutation] = {}
    for function, node in _walk(tree):
        for kind, new_node in _variants(node):
            mutation = _render(lines, function, node, new_node, kind)
            if mutation is not None:
                found.setdefault((mutation.lineno, mutation.new_line), mutation)
    out = list(found.values())
    random.Random(seed).shuffle(out)
    return out[:limit]


def _walk(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    def visit(node: ast.AST, function: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else ""
            yield function, child
            yield from visit(child, name or function)

    yield from visit(tree, "")


def _variants(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP_CMP:
        yield (
            "flip_compare",
            ast.Compare(node.left, [_FLIP_CMP[type(node.ops[0])]()], node.comparators),
        )
    if isinstance(node, ast.BinOp):
        if type(node.op) in _FLIP_BIN:
            yield "flip_binop", ast.BinOp(node.left, _FLIP_BIN[type(node.op)](), node.right)
        if isinstance(node.op, _NONCOMMUTATIVE):
            yield "swap_operands", ast.BinOp(node.right, node.op, node.left)
    if isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "flip_binop", ast.BoolOp(other, node.values)
    if isinstance(node, ast.Subscript | ast.Call | ast.Compare):
        yield from _off_by_one(node)
    if isinstance(node, ast.If) and not node.orelse and node.lineno == node.body[0].lineno - 1:
        yield "drop_branch", node


def _off_by_one(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    if isinstance(node, ast.Call) and not (
        isinstance(node.func, ast.Name) and node.func.id == "range"
    ):
        return
    for child in ast.walk(node):
        if isinstance(child, ast.Constant) and type(child.value) is int and 0 <= child.value < 100:
            copy = ast.parse(ast.unparse(node), mode="eval").body
            for twin in ast.walk(copy):
                if isinstance(twin, ast.Constant) and twin.value == child.value:
                    twin.value = child.value + 1
                    yield "off_by_one", copy
                    return


def _render(
    lines: list[str], function: str, node: ast.AST, new: ast.AST, kind: str
) -> Mutation | None:
    if kind == "drop_branch":
        assert isinstance(node, ast.If)
        body = node.body
        if len(body) != 1 or body[0].lineno != body[0].end_lineno or isinstance(body[0], ast.Pass):
            return None
        line = lines[body[0].lineno - 1]
        indent = line[: len(line) - len(line.lstrip())]
        return Mutation(kind, function, body[0].lineno, line, f"{indent}pass\n")
    lineno, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    if lineno is None or lineno != end:
        return None
    line = lines[lineno - 1]
    start, stop = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    try:
        old_text, new_text = line.encode()[start:stop].decode(), ast.unparse(new)
        if ast.unparse(ast.parse(old_text, mode="eval")) == new_text or "\n" in new_text:
            return None
    except (UnicodeDecodeError, ValueError, SyntaxError):
        return None
    encoded = line.encode()
    new_line = (encoded[:start] + new_text.encode() + encoded[stop:]).decode()
    try:
        compile("".join(lines[: lineno - 1] + [new_line] + lines[lineno:]), "m", "exec")
    except SyntaxError:
        return None
    return Mutation(kind, function, lineno, line, new_line)
