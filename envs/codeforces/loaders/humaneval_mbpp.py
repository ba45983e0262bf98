"""openai/openai_humaneval and mbpp rows -> function-style Problems.

HumanEval fields: task_id, prompt (signature + docstring), canonical_solution, test (a
`check(candidate)` function of asserts), entry_point. MBPP fields: task_id, text (the sanitized
config: prompt), code, test_list (assert lines), test_setup_code, challenge_test_list.

The published tests are assert statements that run in the same process as the solution, which
a hostile policy could subvert (exit early, patch `assert`'s helpers). We therefore translate
each assert into a value test for sandbox.judging.functional, whose trusted harness compares the value
the function returned where the submission cannot reach:
    assert f(ARGS) == VALUE    assert VALUE == f(ARGS)    assert f(ARGS)    assert not f(ARGS)
    assert f(ARGS) is True / False / None     assert abs(f(ARGS) - VALUE) < TOL  (or <=)
with ARGS and VALUE Python literals (`candidate` stands for the entry point). A row with an
assert of any other shape (loops, helper calls, sets) is unsupported: refused, or skipped and
counted with skip_unsupported=True. Asserts that call nothing (`assert True`) are ignored.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from envs.codeforces.loaders.rows import Unsupported, load_split
from envs.codeforces.problems import Problem
from sandbox.judging.functional import function_tests

_CALL_NAME = re.compile(r"assert\s+(?:not\s+)?(?:abs\()?\s*([A-Za-z_]\w*)\s*\(")


def assert_cases(code: str, names: set[str]) -> tuple[list[dict[str, Any]], float]:
    """Value tests from the asserts in `code` calling one of `names`, and the float tolerance
    (0 when every comparison is exact). Raises Unsupported on an assert we cannot translate."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise Unsupported(f"test code does not parse ({exc.msg})") from None
    cases, tolerance = [], 0.0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert) or not _calls(node.test, names):
            continue
        case, tol = _translate(node.test, names)
        cases.append(case)
        tolerance = max(tolerance, tol)
    if not cases:
        raise Unsupported("no assert calls the function")
    return cases, tolerance


def _calls(node: ast.AST, names: set[str]) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in names
        for n in ast.walk(node)
    )


def _translate(test: ast.expr, names: set[str]) -> tuple[dict[str, Any], float]:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return {"args": _args(test.operand, names), "expected": False}, 0.0
    if isinstance(test, ast.Call):
        return {"args": _args(test, names), "expected": True}, 0.0
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, ast.Eq):
            call, value = (left, right) if _calls(left, names) else (right, left)
            return {"args": _args(call, names), "expected": _literal(value)}, 0.0
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant):
            return {"args": _args(left, names), "expected": right.value}, 0.0
        if isinstance(op, ast.Lt | ast.LtE):
            return _tolerance_case(left, right, names)
    raise Unsupported(f"assert of an untranslatable shape: {ast.unparse(test)[:80]}")


def _tolerance_case(left: ast.expr, right: ast.expr, names: set[str]) -> tuple[dict, float]:
    """abs(f(ARGS) - VALUE) < TOL."""
    diff = left.args[0] if isinstance(left, ast.Call) and len(left.args) == 1 else None
    ok = (
        isinstance(left, ast.Call)
        and isinstance(left.func, ast.Name)
        and left.func.id in ("abs", "fabs")
        and isinstance(diff, ast.BinOp)
        and isinstance(diff.op, ast.Sub)
    )
    if not ok or not isinstance(diff, ast.BinOp):
        raise Unsupported(f"assert of an untranslatable shape: {ast.unparse(left)[:80]}")
    tol = _literal(right)
    if not isinstance(tol, int | float) or not math.isfinite(tol):
        raise Unsupported("tolerance is not a number")
    return {"args": _args(diff.left, names), "expected": _literal(diff.right)}, float(tol)


def _args(call: ast.expr, names: set[str]) -> list[Any]:
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        raise Unsupported(f"expected a call of the function, got {ast.unparse(call)[:80]}")
    if call.func.id not in names or call.keywords:
        raise Unsupported(f"call {ast.unparse(call)[:80]} is not a plain call of the function")
    return [_literal(a) for a in call.args]


def _literal(node: ast.expr) -> Any:
    try:
        value = _constant(node)
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError, OverflowError):
        raise Unsupported(f"{ast.unparse(node)[:80]} is not a literal") from None
    if isinstance(value, set | frozenset | complex | bytes):
        raise Unsupported(f"{type(value).__name__} values cannot be compared as JSON")
    return value


_ARITHMETIC = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_MAX_SIZE = 10_000  # digits / characters a folded constant may have


def _constant(node: ast.expr) -> Any:
    """A literal, or arithmetic on number and string literals as tests write them
    (`(3 + 5 + 7, 3 * 5 * 7)`, `2.0/3.0`), evaluated without running any code."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _constant(node.operand)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError("sign of a non-number")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        a, b = _constant(node.left), _constant(node.right)
        if isinstance(node.op, ast.Mult) and isinstance(a, str | list) and isinstance(b, int):
            if len(a) * b > _MAX_SIZE:
                raise ValueError("too large")
        value = _ARITHMETIC[type(node.op)](a, b)
        if isinstance(value, int) and value.bit_length() > 4 * _MAX_SIZE:
            raise ValueError("too large")
        return value
    if isinstance(node, ast.Tuple | ast.List):
        items = [_constant(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    raise ValueError(f"not a constant: {ast.unparse(node)[:80]}")


def _problem(pid: str, statement: str, entry: str, code: str, names: set[str], **extra: Any):
    cases, tolerance = assert_cases(code, names)
    try:
        tests = [{"input": t.stdin, "output": t.expected or ""} for t in function_tests(cases)]
    except (TypeError, ValueError) as exc:
        raise Unsupported(f"tests are not JSON values ({exc})") from None
    judge = {"mode": "float", "abs_tol": tolerance, "rel_tol": 0.0} if tolerance else {}
    return Problem.from_row(
        {
            "id": pid,
            "title": pid,
            "statement": statement,
            "samples": tests[:1],
            "tests": tests[1:],
            "judge": judge,
            "function_name": entry,
            **extra,
        }
    )


def humaneval_problem(row: dict[str, Any]) -> Problem:
    entry, prompt = str(row["entry_point"]), str(row["prompt"])
    statement = f"Complete this Python function:\n```python\n{prompt.rstrip()}\n```"
    return _problem(
        str(row["task_id"]),
        statement,
        entry,
        str(row["test"]),
        {"candidate", entry},
        reference={"python": prompt + str(row.get("canonical_solution") or "")},
        starter_code="",
    )


def mbpp_problem(row: dict[str, Any]) -> Problem:
    tests = list(row.get("test_list") or [])
    if row.get("test_setup_code"):
        raise Unsupported("test_setup_code must run before the tests")
    match = next((m for m in map(_CALL_NAME.match, tests) if m), None)
    if match is None:
        raise Unsupported("cannot find the function name in test_list")
    entry = match.group(1)
    text = str(row.get("text") or row.get("prompt") or "")
    statement = f"{text.strip()}\nYour code should pass this test:\n{tests[0]}"
    return _problem(
        f"mbpp-{row['task_id']}",
        statement,
        entry,
        "\n".join(tests + list(row.get("challenge_test_list") or [])),
        {entry},
        reference={"python": str(row.get("code") or "")},
    )


def _load(path: str, split: str, fmt: str, options: dict[str, Any]) -> list[Problem]:
    return load_split(
        path,
        split,
        humaneval_problem if fmt == "humaneval" else mbpp_problem,
        id_field="task_id",
        fmt=fmt,
        split_mode=options.get("split_mode", "hash"),
        skip_unsupported=bool(options.get("skip_unsupported", False)),
    )


def load_humaneval(path: str, split: str, **options: Any) -> list[Problem]:
    return _load(path, split, "humaneval", options)


def load_mbpp(path: str, split: str, **options: Any) -> list[Problem]:
    return _load(path, split, "mbpp", options)
