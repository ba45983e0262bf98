"""CodeAgent-v0 tasks: small original Python repositories with a bug to fix or a stub to fill.

Each task is generated from one spec below: a module whose function has a buggy (or missing)
line, the one-line fix, a visible test script shipped in the repository, and hidden cases the env
runs after the episode (never uploaded while the agent runs). A spec yields two tasks that share
the repository and differ in the issue text:

- `easy`: the issue names the file, the wrong line and the right one: the fix is one templated
  `str_replace` (sized for a ~1M-parameter model to learn);
- `hard`: the issue describes only the behaviour (a failing call and what it should give): the
  agent must read the code to find the line.

A task row: id, tier, spec, split, issue (the user message), files ({path: text}, uploaded as the
repository), test_command (what `run_tests` runs), hidden ([{"call", "expect"}]), module, and
reference ({"path", "old", "new"}: the fix, used only for the scripted SFT references).
Every spec's buggy code fails every hidden case and its fixed code passes them all
(tests/envs/test_codeagent_tasks.py checks this by running them).
"""

from __future__ import annotations

import hashlib
from typing import Any

# (name, module, source with {X} where the line differs, buggy X, fixed X, behaviour in words,
#  visible cases, hidden cases); a case is (call expression, expected JSON value).
Spec = tuple[str, str, str, str, str, str, list[tuple[str, Any]], list[tuple[str, Any]]]

_BUGS: list[Spec] = [
    (
        "add",
        "calc",
        "def add(a, b):\n    return {X}\n",
        "a - b",
        "a + b",
        "add(a, b) should return the sum",
        [("add(2, 3)", 5)],
        [("add(10, 4)", 14), ("add(-1, 7)", 6), ("add(8, 8)", 16)],
    ),
    (
        "multiply",
        "calc",
        "def multiply(a, b):\n    return {X}\n",
        "a + b",
        "a * b",
        "multiply(a, b) should return the product",
        [("multiply(3, 4)", 12)],
        [("multiply(5, 6)", 30), ("multiply(7, 1)", 7), ("multiply(0, 9)", 0)],
    ),
    (
        "subtract",
        "calc",
        "def subtract(a, b):\n    return {X}\n",
        "b - a",
        "a - b",
        "subtract(a, b) should return a minus b",
        [("subtract(9, 4)", 5)],
        [("subtract(10, 3)", 7), ("subtract(1, 5)", -4), ("subtract(0, 2)", -2)],
    ),
    (
        "square",
        "shapes",
        "def square(x):\n    return {X}\n",
        "x * 2",
        "x * x",
        "square(x) should return x squared",
        [("square(3)", 9)],
        [("square(5)", 25), ("square(4)", 16), ("square(10)", 100)],
    ),
    (
        "cube",
        "shapes",
        "def cube(x):\n    return {X}\n",
        "x * x",
        "x * x * x",
        "cube(x) should return x cubed",
        [("cube(2)", 8)],
        [("cube(3)", 27), ("cube(4)", 64), ("cube(-2)", -8)],
    ),
    (
        "area",
        "shapes",
        "def rect_area(w, h):\n    return {X}\n",
        "w + h",
        "w * h",
        "rect_area(w, h) should return the area",
        [("rect_area(3, 4)", 12)],
        [("rect_area(5, 6)", 30), ("rect_area(10, 2)", 20), ("rect_area(7, 3)", 21)],
    ),
    (
        "perimeter",
        "shapes",
        "def perimeter(w, h):\n    return {X}\n",
        "2 * w + h",
        "2 * (w + h)",
        "perimeter(w, h) should return the rectangle's perimeter",
        [("perimeter(3, 4)", 14)],
        [("perimeter(1, 1)", 4), ("perimeter(5, 2)", 14), ("perimeter(10, 10)", 40)],
    ),
    (
        "is_even",
        "numbers",
        "def is_even(n):\n    return {X}\n",
        "n % 2 == 1",
        "n % 2 == 0",
        "is_even(n) should be True for even n",
        [("is_even(4)", True)],
        [("is_even(10)", True), ("is_even(7)", False), ("is_even(0)", True)],
    ),
    (
        "is_negative",
        "numbers",
        "def is_negative(x):\n    return {X}\n",
        "x > 0",
        "x < 0",
        "is_negative(x) should be True below zero",
        [("is_negative(-2)", True)],
        [("is_negative(-3)", True), ("is_negative(5)", False), ("is_negative(-1)", True)],
    ),
    (
        "larger",
        "numbers",
        "def larger(a, b):\n    return {X}\n",
        "a if a < b else b",
        "a if a > b else b",
        "larger(a, b) should return the larger number",
        [("larger(2, 9)", 9)],
        [("larger(7, 3)", 7), ("larger(-1, -5)", -1), ("larger(0, 4)", 4)],
    ),
    (
        "smaller",
        "numbers",
        "def smaller(a, b):\n    return {X}\n",
        "max(a, b)",
        "min(a, b)",
        "smaller(a, b) should return the smaller number",
        [("smaller(2, 9)", 2)],
        [("smaller(7, 3)", 3), ("smaller(-1, -5)", -5), ("smaller(0, 4)", 0)],
    ),
    (
        "half",
        "numbers",
        "def half(x):\n    return {X}\n",
        "x / 3",
        "x / 2",
        "half(x) should return x divided by two",
        [("half(8)", 4.0)],
        [("half(10)", 5.0), ("half(3)", 1.5), ("half(-6)", -3.0)],
    ),
    (
        "double",
        "numbers",
        "def double(x):\n    return {X}\n",
        "x + 2",
        "x * 2",
        "double(x) should return twice x",
        [("double(5)", 10)],
        [("double(7)", 14), ("double(1)", 2), ("double(-3)", -6)],
    ),
    (
        "negate",
        "numbers",
        "def negate(x):\n    {X}\n",
        "return x",
        "return -x",
        "negate(x) should return minus x",
        [("negate(5)", -5)],
        [("negate(-2)", 2), ("negate(9)", -9), ("negate(1)", -1)],
    ),
    (
        "sum_to",
        "series",
        "def sum_to(n):\n    return sum({X})\n",
        "range(n)",
        "range(n + 1)",
        "sum_to(n) should include n itself",
        [("sum_to(3)", 6)],
        [("sum_to(4)", 10), ("sum_to(10)", 55), ("sum_to(1)", 1)],
    ),
    (
        "factorial",
        "series",
        "def factorial(n):\n    {X}\n    for i in range(2, n + 1):\n        result *= i\n    return result\n",
        "result = 0",
        "result = 1",
        "factorial(n) should return n!",
        [("factorial(3)", 6)],
        [("factorial(4)", 24), ("factorial(5)", 120), ("factorial(1)", 1)],
    ),
    (
        "average",
        "stats",
        "def average(xs):\n    return sum(xs) / {X}\n",
        "(len(xs) + 1)",
        "len(xs)",
        "average(xs) should return the mean",
        [("average([2, 4])", 3.0)],
        [("average([1, 2, 3])", 2.0), ("average([10])", 10.0), ("average([5, 7])", 6.0)],
    ),
    (
        "total",
        "stats",
        "def total(xs):\n    result = 0\n    for x in xs:\n        {X}\n    return result\n",
        "result = x",
        "result += x",
        "total(xs) should return the sum of the list",
        [("total([1, 2, 3])", 6)],
        [("total([4, 5])", 9), ("total([10, 1, 1])", 12), ("total([2, 2])", 4)],
    ),
    (
        "count_pos",
        "stats",
        "def count_positive(xs):\n    return len([x for x in xs if {X}])\n",
        "x < 0",
        "x > 0",
        "count_positive(xs) should count the items above zero",
        [("count_positive([1, -2, 3])", 2)],
        [
            ("count_positive([5, 6])", 2),
            ("count_positive([-1, 4, 5])", 2),
            ("count_positive([7])", 1),
        ],
    ),
    (
        "last",
        "lists",
        "def last(xs):\n    return xs[{X}]\n",
        "-2",
        "-1",
        "last(xs) should return the last item",
        [("last([1, 2, 3])", 3)],
        [("last([4, 5])", 5), ("last([7, 8, 9, 10])", 10), ("last(['a', 'b'])", "b")],
    ),
    (
        "first",
        "lists",
        "def first(xs):\n    return xs[{X}]\n",
        "1",
        "0",
        "first(xs) should return the first item",
        [("first([1, 2, 3])", 1)],
        [("first([4, 5])", 4), ("first(['x', 'y'])", "x"), ("first([9, 8, 7])", 9)],
    ),
    (
        "drop_first",
        "lists",
        "def drop_first(xs):\n    return xs[{X}]\n",
        "2:",
        "1:",
        "drop_first(xs) should drop only the first item",
        [("drop_first([1, 2, 3])", [2, 3])],
        [
            ("drop_first([4, 5])", [5]),
            ("drop_first([7, 8, 9, 10])", [8, 9, 10]),
            ("drop_first([1, 1])", [1]),
        ],
    ),
    (
        "reverse",
        "text",
        "def reverse(s):\n    return s[{X}]\n",
        "::1",
        "::-1",
        "reverse(s) should return s backwards",
        [("reverse('abc')", "cba")],
        [("reverse('hello')", "olleh"), ("reverse('ab')", "ba"), ("reverse('xyz')", "zyx")],
    ),
    (
        "shout",
        "text",
        "def shout(s):\n    return s.{X}()\n",
        "lower",
        "upper",
        "shout(s) should return s in capitals",
        [("shout('hi')", "HI")],
        [("shout('abc')", "ABC"), ("shout('Go')", "GO"), ("shout('yes')", "YES")],
    ),
    (
        "whisper",
        "text",
        "def whisper(s):\n    return s.{X}()\n",
        "title",
        "lower",
        "whisper(s) should return s in lower case",
        [("whisper('HI')", "hi")],
        [("whisper('ABC')", "abc"), ("whisper('Go Home')", "go home"), ("whisper('YES')", "yes")],
    ),
    (
        "vowels",
        "text",
        "def count_vowels(s):\n    return sum(c in {X} for c in s)\n",
        "'aei'",
        "'aeiou'",
        "count_vowels(s) should count a, e, i, o and u",
        [("count_vowels('you')", 2)],
        [("count_vowels('out')", 2), ("count_vowels('blue')", 2), ("count_vowels('oboe')", 3)],
    ),
    (
        "words",
        "text",
        "def word_count(s):\n    return len(s.split({X}))\n",
        "','",
        "",
        "word_count(s) should count words separated by spaces",
        [("word_count('a b c')", 3)],
        [
            ("word_count('one two')", 2),
            ("word_count('x y z w')", 4),
            ("word_count('hi there you')", 3),
        ],
    ),
    (
        "join",
        "text",
        "def join_words(words):\n    return {X}.join(words)\n",
        "'-'",
        "' '",
        "join_words(words) should join with single spaces",
        [("join_words(['a', 'b'])", "a b")],
        [
            ("join_words(['hello', 'world'])", "hello world"),
            ("join_words(['x', 'y', 'z'])", "x y z"),
            ("join_words(['go', 'on'])", "go on"),
        ],
    ),
    (
        "greet",
        "text",
        "def greet(name):\n    return {X} + name + '!'\n",
        "'Hello '",
        "'Hello, '",
        "greet(name) should return 'Hello, NAME!'",
        [("greet('Ann')", "Hello, Ann!")],
        [
            ("greet('Bob')", "Hello, Bob!"),
            ("greet('Eve')", "Hello, Eve!"),
            ("greet('Zed')", "Hello, Zed!"),
        ],
    ),
    (
        "minutes",
        "units",
        "def to_seconds(minutes):\n    return minutes * {X}\n",
        "100",
        "60",
        "to_seconds(minutes) should convert minutes to seconds",
        [("to_seconds(2)", 120)],
        [("to_seconds(1)", 60), ("to_seconds(5)", 300), ("to_seconds(10)", 600)],
    ),
    (
        "fahrenheit",
        "units",
        "def to_fahrenheit(c):\n    return c * 9 / 5 {X} 32\n",
        "-",
        "+",
        "to_fahrenheit(c) should convert Celsius to Fahrenheit",
        [("to_fahrenheit(100)", 212.0)],
        [("to_fahrenheit(0)", 32.0), ("to_fahrenheit(10)", 50.0), ("to_fahrenheit(-40)", -40.0)],
    ),
    (
        "percent",
        "units",
        "def percent(part, whole):\n    return part / whole * {X}\n",
        "10",
        "100",
        "percent(part, whole) should return a percentage",
        [("percent(1, 2)", 50.0)],
        [("percent(1, 4)", 25.0), ("percent(3, 3)", 100.0), ("percent(1, 10)", 10.0)],
    ),
    (
        "clamp",
        "units",
        "def clamp(x, lo, hi):\n    return {X}\n",
        "min(lo, max(x, hi))",
        "max(lo, min(x, hi))",
        "clamp(x, lo, hi) should keep x within lo..hi",
        [("clamp(5, 0, 10)", 5)],
        [("clamp(12, 2, 8)", 8), ("clamp(15, 0, 10)", 10), ("clamp(7, 1, 9)", 7)],
    ),
]
_FEATURES: list[Spec] = [
    (
        "triple",
        "calc",
        "def triple(x):\n    {X}\n",
        "raise NotImplementedError",
        "return 3 * x",
        "triple(x) is not implemented yet; it should return three times x",
        [("triple(2)", 6)],
        [("triple(5)", 15), ("triple(0)", 0), ("triple(-1)", -3)],
    ),
    (
        "is_odd",
        "numbers",
        "def is_odd(n):\n    {X}\n",
        "raise NotImplementedError",
        "return n % 2 == 1",
        "is_odd(n) is not implemented yet; it should be True for odd n",
        [("is_odd(3)", True)],
        [("is_odd(4)", False), ("is_odd(7)", True), ("is_odd(0)", False)],
    ),
    (
        "length",
        "lists",
        "def length(xs):\n    {X}\n",
        "raise NotImplementedError",
        "return len(xs)",
        "length(xs) is not implemented yet; it should return the number of items",
        [("length([1, 2])", 2)],
        [("length([])", 0), ("length([5, 5, 5])", 3), ("length(['a'])", 1)],
    ),
    (
        "exclaim",
        "text",
        "def exclaim(s):\n    {X}\n",
        "raise NotImplementedError",
        "return s + '!'",
        "exclaim(s) is not implemented yet; it should add '!' at the end",
        [("exclaim('hi')", "hi!")],
        [("exclaim('go')", "go!"), ("exclaim('')", "!"), ("exclaim('yes')", "yes!")],
    ),
]
SPECS: list[Spec] = _BUGS + _FEATURES
TIERS = ("easy", "hard")
TEST_FRACTION = 0.25  # specs held out for the test split (by a hash of their name)


def split_of(name: str) -> str:
    bucket = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if bucket < TEST_FRACTION else "train"


def build_tasks() -> list[dict[str, Any]]:
    """Every task (all specs x both tiers), in a fixed order."""
    return [_task(spec, tier) for spec in SPECS for tier in TIERS]


def _task(spec: Spec, tier: str) -> dict[str, Any]:
    name, module, source, old, new, behaviour, visible, hidden = spec
    fn = source.split("(")[0].removeprefix("def ")
    path = f"{module}.py"
    call, expect = visible[0]  # the issue quotes a visible case, never a hidden one
    if tier == "easy":
        issue = f"In {path}, {behaviour}. Replace `{old}` with `{new}`."
    else:
        issue = f"Bug in {path}: {call} should give {expect!r} ({behaviour})."
    return {
        "id": f"{name}-{tier}",
        "spec": name,
        "tier": tier,
        "split": split_of(name),
        "issue": issue,
        "module": module,
        "function": fn,
        "files": {
            path: _module_text(module, source.replace("{X}", old)),
            f"tests/test_{module}.py": _visible_test(module, visible),
        },
        "test_command": f"python3 tests/test_{module}.py",
        "hidden": [{"call": c, "expect": e} for c, e in hidden],
        "reference": {"path": path, "old": old, "new": new},
    }


def fixed_source(task: dict[str, Any]) -> str:
    """The module text with the reference fix applied (for the data checks)."""
    ref = task["reference"]
    text = task["files"][ref["path"]]
    assert text.count(ref["old"]) == 1, f"{task['id']}: the fix's snippet is not unique"
    return text.replace(ref["old"], ref["new"])


def _module_text(module: str, function_source: str) -> str:
    return f'"""The {module} helpers."""\n\n\n{function_source}'


def _visible_test(module: str, cases: list[tuple[str, Any]]) -> str:
    checks = "".join(f"    check({call!r}, {expect!r})\n" for call, expect in cases)
    return (
        "import os\nimport sys\n\n"
        "sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n"
        f"import {module}  # noqa: E402\n\n"
        "failed = 0\n\n\n"
        "def check(call, expected):\n"
        "    global failed\n"
        "    try:\n"
        f"        got = eval(call, vars({module}))\n"
        "    except Exception as exc:\n"
        "        got = f'{type(exc).__name__}: {exc}'\n"
        "    ok = got == expected and type(got) is type(expected)\n"
        "    failed += not ok\n"
        "    print(('PASS' if ok else 'FAIL'), call, '->', repr(got), '' if ok else f'(expected {expected!r})')\n\n\n"
        "if __name__ == '__main__':\n"
        f"{checks}"
        "    sys.exit(1 if failed else 0)\n"
    )
