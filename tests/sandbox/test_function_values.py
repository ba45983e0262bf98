"""The function-style value codec and equality (pure: no sandbox), and request validation."""

from __future__ import annotations

import json
import math

import pytest

from sandbox import Program
from sandbox.judging.functional import decode_value, encode_value, function_call, values_equal


def roundtrip(value: object) -> object:
    return decode_value(encode_value(value))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(1 << 80),
        1.5,
        "x y\n",
        b"\x00\xff",
        1 + 2j,
        [1, [2, (3, 4)]],
        (1, "a"),
        {1, 2, (3, 4)},
        frozenset({frozenset({1})}),
        {1: "a", "b": 2, (1, 2): None, "$x": 1},
        {"plain": {"nested": [1.0]}},
    ],
)
def test_codec_roundtrips_plain_values_with_their_types(value: object) -> None:
    back = roundtrip(value)
    assert back == value and type(back) is type(value)


def test_codec_keeps_special_floats_and_numpy_like_values() -> None:
    assert math.isnan(roundtrip(float("nan")))  # type: ignore[arg-type]
    assert roundtrip(float("-inf")) == float("-inf")

    class Array:
        def tolist(self) -> list[int]:
            return [1, 2]

    assert roundtrip(Array()) == [1, 2]


def test_codec_refuses_custom_objects_and_malformed_tags() -> None:
    with pytest.raises(TypeError, match="not a plain value"):
        encode_value(object())
    for bad in ('{"$set": 1}', '{"$tuple": [1], "x": 2}', '{"$nope": []}', '{"$dict": [[1]]}'):
        with pytest.raises((ValueError, TypeError)):
            decode_value(bad)


def test_equality_follows_python_after_tuple_normalisation() -> None:
    assert values_equal([1, (2, 3)], ((1, [2, 3])))
    assert values_equal({"a": (1, 2)}, {"a": [1, 2]})
    assert values_equal(1.0, 1) and values_equal(True, 1)  # as Python says
    assert values_equal({1, 2}, {2, 1}) and values_equal({1}, frozenset({1}))
    assert not values_equal({1: "a"}, {"1": "a"})  # dict keys are not stringified
    assert not values_equal([1, 2], {1, 2}) and not values_equal("ab", ["a", "b"])
    assert not values_equal(float("nan"), float("nan"))
    assert not values_equal([1], [1, 1]) and not values_equal({"a": 1}, {"a": 1, "b": 2})


def test_function_call_validates_rows() -> None:
    with pytest.raises(ValueError, match="Class.method"):
        function_call("def f(): pass", "f; import os", [{"args": [], "expected": 1}])
    with pytest.raises(ValueError, match="args"):
        function_call("def f(): pass", "f", [{"expected": 1}])
    with pytest.raises(ValueError, match="does not parse"):
        function_call("def f(): pass", "f", [{"check": "def check(c):\n  assert ("}])
    with pytest.raises(ValueError, match="unknown key"):
        function_call("def f(): pass", "f", [{"args": [], "expect": 1}])
    with pytest.raises(ValueError, match="not a plain value"):
        function_call("def f(): pass", "f", [{"args": [object()]}])
    with pytest.raises(ValueError, match="python"):
        Program("cpp", "int main(){}", entry="f")


def test_expected_values_never_reach_the_program_source() -> None:
    """The nonce and the expected value travel in the test payload only (to the trusted
    parent); the program is the submission, untouched."""
    program, tests = function_call("def f(x): return x", "f", [{"args": [1], "expected": 987}])
    assert program.source == "def f(x): return x" and program.entry == "f"
    payload = json.loads(tests[0].stdin)
    assert decode_value(payload["expected"]) == 987
    assert tests[0].expected == f"{payload['nonce']} OK" and len(payload["nonce"]) == 32
    _, again = function_call("def f(x): return x", "f", [{"args": [1], "expected": 987}])
    assert json.loads(again[0].stdin)["nonce"] != payload["nonce"]


def test_tolerance_applies_to_numbers_at_any_depth_only() -> None:
    assert values_equal([1.0000001, {"a": 2.0}], [1, {"a": 2.0000001}], 1e-6)
    assert not values_equal(1.1, 1, 1e-6) and values_equal(1.1, 1, 0, 0.2)
    assert not values_equal(True, 1.0000001, 1e-3)  # booleans are not numbers here
    assert not values_equal("1.0", 1.0, 1.0)
    with pytest.raises(ValueError, match="abs_tol"):
        function_call("def f(): pass", "f", [{"args": [], "expected": 1, "abs_tol": -1}])


def test_the_fast_json_path_agrees_with_the_json_module() -> None:
    from sandbox.judging import fnharness

    assert fnharness._ENCODE is not None  # this Python has the accelerator: the fast path runs
    samples = [None, True, -3, 1e300, float("inf"), 'é\n"', [1, {"a": [None]}], {"k": 1.5}]
    for value in samples:
        text = fnharness.dumps(value)
        assert text == json.dumps(value, separators=(",", ":"))
        assert json.loads(text) == fnharness.loads(text) or value != value
    assert math.isnan(fnharness.loads("NaN"))
    assert fnharness.loads('[1, {"a": 2}]') == [1, {"a": 2}]  # whitespace inside is fine
    for bad in ("[1] 2", "", "[1,", "{'a': 1}", "nul"):
        with pytest.raises(ValueError):
            fnharness.loads(bad)
    with pytest.raises(RecursionError):
        fnharness.loads("[" * 100_000 + "]" * 100_000)


def test_function_case_reads_a_test_back() -> None:
    from sandbox.judging.functional import function_case

    rows = [
        {"args": [[2, 7], (1, 2)], "expected": {1: "a"}, "abs_tol": 0.5},
        {"kwargs": {"x": 1}},
        {"check": "assert f(1) == 2"},
    ]
    _, tests = function_call("def f(x): return x", "f", rows)
    assert [function_case(t) for t in tests] == rows
    with pytest.raises(ValueError, match="not a function-style test"):
        function_case(tests[0].__class__("1 2\n", "3"))
