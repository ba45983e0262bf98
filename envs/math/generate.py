"""Generate the shipped Math-v0 problem set: original problems with answers computed exactly.

    python -m envs.math.generate            # rewrites envs/data/math/{train,test}.jsonl

Each template draws parameters from a seeded RNG, writes the problem text, and computes the
answer with exact integer / Fraction arithmetic. Rows keep their template name and parameters so
tests can re-derive every answer by brute force. The split is a hash of the problem text, so a
problem can never be in both splits. Deterministic: rerunning yields byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from envs.math.data import DATA_DIR

PER_TEMPLATE = 15
SEED = 20250
TEST_PERCENT = 20

Problem = tuple[str, str, dict]  # (question, answer LaTeX, parameters)


def term(coef: int, var: str = "", *, first: bool = False) -> str:
    """One signed term: term(-1, "x") -> "- x", term(3, "x", first=True) -> "3x"."""
    mag = "" if var and abs(coef) == 1 else str(abs(coef))
    if first:
        return f"{'-' if coef < 0 else ''}{mag}{var}"
    return f"{'-' if coef < 0 else '+'} {mag}{var}"


def latex(x: Fraction | int) -> str:
    x = Fraction(x)
    if x.denominator == 1:
        return str(x.numerator)
    sign = "-" if x < 0 else ""
    return f"{sign}\\frac{{{abs(x.numerator)}}}{{{x.denominator}}}"


# -- arithmetic ------------------------------------------------------------------------------------
def frac_sum(r: random.Random) -> Problem:
    a, b, c, d = r.randint(1, 9), r.randint(2, 12), r.randint(1, 9), r.randint(2, 12)
    q = f"Compute $\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{d}}}$ and give the result in lowest terms."
    return q, latex(Fraction(a, b) + Fraction(c, d)), {"a": a, "b": b, "c": c, "d": d}


def order_of_ops(r: random.Random) -> Problem:
    a, b, c, d = r.randint(10, 99), r.randint(2, 12), r.randint(2, 12), r.randint(2, 9)
    q = f"Evaluate $ {a} - {b} \\times {c} + {d}^2 $."
    return q, str(a - b * c + d * d), {"a": a, "b": b, "c": c, "d": d}


def percent_of(r: random.Random) -> Problem:
    p, n = r.choice([5, 12, 15, 25, 35, 40, 65, 75, 120, 150]), r.randint(2, 60) * 4
    q = f"What is ${p}\\%$ of ${n}$?"
    return q, latex(Fraction(p * n, 100)), {"p": p, "n": n}


def missing_value(r: random.Random) -> Problem:
    known = [r.randint(1, 50) for _ in range(4)]
    mean = r.randint(max(1, (sum(known) + 1) // 5 + 1), 60)
    q = (
        f"The mean of five numbers is ${mean}$. Four of them are "
        f"${known[0]}$, ${known[1]}$, ${known[2]}$ and ${known[3]}$. What is the fifth number?"
    )
    return q, str(5 * mean - sum(known)), {"mean": mean, "known": known}


# -- algebra ---------------------------------------------------------------------------------------
def linear_equation(r: random.Random) -> Problem:
    a, c = r.sample([x for x in range(-9, 10) if x], 2)
    b, d = r.randint(-20, 20), r.randint(-20, 20)
    q = (
        f"Solve for $x$: ${term(a, 'x', first=True)} {term(b)} = "
        f"{term(c, 'x', first=True)} {term(d)}$."
    )
    return q, latex(Fraction(d - b, a - c)), {"a": a, "b": b, "c": c, "d": d}


def root_squares(r: random.Random) -> Problem:
    s, t = r.randint(-9, 9), r.randint(-9, 9)
    b, c = -(s + t), s * t
    q = f"Let $r$ and $s$ be the roots of $x^2 {term(b, 'x')} {term(c)} = 0$. Find $r^2 + s^2$."
    return q, str(s * s + t * t), {"b": b, "c": c}


def system_product(r: random.Random) -> Problem:
    x, y = (
        Fraction(r.randint(-15, 15), r.choice([1, 2])),
        Fraction(r.randint(-15, 15), r.choice([1, 2])),
    )
    s, d = x + y, x - y
    q = f"Real numbers $x$ and $y$ satisfy $x + y = {latex(s)}$ and $x - y = {latex(d)}$. Find $xy$."
    return q, latex(x * y), {"sum": str(s), "diff": str(d)}


def composition(r: random.Random) -> Problem:
    a, b, c, k = r.randint(2, 7), r.randint(-9, 9), r.randint(1, 9), r.randint(-5, 5)
    q = f"Let $f(x) = {a}x {term(b)}$ and $g(x) = x^2 - {c}$. Compute $f(g({k}))$."
    return q, str(a * (k * k - c) + b), {"a": a, "b": b, "c": c, "k": k}


def series_sum(r: random.Random) -> Problem:
    a, d, n = r.randint(-10, 20), r.randint(-5, 9), r.randint(5, 40)
    q = (
        f"An arithmetic sequence has first term ${a}$ and common difference ${d}$. "
        f"What is the sum of its first ${n}$ terms?"
    )
    return q, str(n * (2 * a + (n - 1) * d) // 2), {"a": a, "d": d, "n": n}


# -- number theory ---------------------------------------------------------------------------------
def divisor_count(r: random.Random) -> Problem:
    n = r.choice([2, 3, 5, 7]) ** r.randint(1, 4) * r.choice([6, 10, 12, 15, 21, 35, 36, 45])
    q = f"How many positive divisors does ${n}$ have?"
    return q, str(_num_divisors(n)), {"n": n}


def power_mod(r: random.Random) -> Problem:
    a, k, m = r.randint(2, 19), r.randint(20, 500), r.choice([7, 9, 11, 13, 17, 100, 1000])
    q = f"What is the remainder when ${a}^{{{k}}}$ is divided by ${m}$?"
    return q, str(pow(a, k, m)), {"a": a, "k": k, "m": m}


def lcm_minus_gcd(r: random.Random) -> Problem:
    g = r.randint(2, 12)
    a, b = g * r.randint(2, 20), g * r.randint(2, 20)
    q = f"Find $\\operatorname{{lcm}}({a}, {b}) - \\gcd({a}, {b})$."
    return q, str(math.lcm(a, b) - math.gcd(a, b)), {"a": a, "b": b}


def digit_sum_power(r: random.Random) -> Problem:
    n = r.randint(10, 120)
    q = f"What is the sum of the decimal digits of $2^{{{n}}}$?"
    return q, str(sum(map(int, str(2**n)))), {"n": n}


def divisible_by_either(r: random.Random) -> Problem:
    a, b, n = r.randint(2, 9), r.randint(10, 19), r.randint(100, 2000)
    q = f"How many integers from $1$ to ${n}$ inclusive are divisible by ${a}$ or by ${b}$?"
    return q, str(n // a + n // b - n // math.lcm(a, b)), {"a": a, "b": b, "n": n}


def modular_inverse(r: random.Random) -> Problem:
    m = r.choice([11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 97, 101])
    a = r.randint(2, m - 1)
    q = f"Find the integer $x$ with $0 \\le x < {m}$ such that ${a}x \\equiv 1 \\pmod{{{m}}}$."
    return q, str(pow(a, -1, m)), {"a": a, "m": m}


# -- combinatorics ---------------------------------------------------------------------------------
def committee(r: random.Random) -> Problem:
    n, k = r.randint(6, 20), r.randint(2, 5)
    q = f"In how many ways can a committee of ${k}$ people be chosen from a group of ${n}$ people?"
    return q, str(math.comb(n, k)), {"n": n, "k": k}


def word_arrangements(r: random.Random) -> Problem:
    letters = r.choices("ABCDE", k=r.randint(5, 8))
    word = "".join(letters)
    q = f"How many distinct strings can be formed by rearranging all the letters of {word}?"
    count = math.factorial(len(word))
    for c in Counter(word).values():
        count //= math.factorial(c)
    return q, str(count), {"word": word}


def grid_paths_avoiding(r: random.Random) -> Problem:
    w, h = r.randint(3, 7), r.randint(3, 7)
    p, s = r.randint(1, w - 1), r.randint(1, h - 1)
    q = (
        f"A path from $(0,0)$ to $({w},{h})$ moves one unit right or one unit up at each step. "
        f"How many such paths do not pass through the point $({p},{s})$?"
    )
    total = math.comb(w + h, w) - math.comb(p + s, p) * math.comb(w - p + h - s, w - p)
    return q, str(total), {"w": w, "h": h, "p": p, "s": s}


def dice_sum(r: random.Random) -> Problem:
    sides = r.choice([4, 6, 8, 10])
    target = r.randint(3, 2 * sides - 1)
    q = (
        f"Two fair {sides}-sided dice, with faces numbered $1$ to ${sides}$, are rolled. "
        f"What is the probability that the sum of the two numbers is ${target}$?"
    )
    ways = sum(1 for x in range(1, sides + 1) if 1 <= target - x <= sides)
    return q, latex(Fraction(ways, sides * sides)), {"sides": sides, "target": target}


def derangements(r: random.Random) -> Problem:
    n = r.randint(3, 9)
    q = (
        f"${n}$ people each put a hat in a box and then each takes one hat back at random. "
        "In how many of the possible assignments does nobody get their own hat?"
    )
    return q, str(_derangements(n)), {"n": n}


def stars_and_bars(r: random.Random) -> Problem:
    k, n = r.randint(2, 5), r.randint(6, 15)
    q = (
        f"In how many ways can ${n}$ identical balls be placed into ${k}$ distinct boxes "
        "so that every box gets at least one ball?"
    )
    return q, str(math.comb(n - 1, k - 1)), {"n": n, "k": k}


def _num_divisors(n: int) -> int:
    count, p = 1, 2
    while p * p <= n:
        e = 0
        while n % p == 0:
            n //= p
            e += 1
        count *= e + 1
        p += 1
    return count * (2 if n > 1 else 1)


def _derangements(n: int) -> int:
    d = [1, 0]
    for i in range(2, n + 1):
        d.append((i - 1) * (d[-1] + d[-2]))
    return d[n]


TEMPLATES: dict[str, tuple[str, Callable[[random.Random], Problem]]] = {
    f.__name__: (topic, f)
    for topic, fs in {
        "arithmetic": [frac_sum, order_of_ops, percent_of, missing_value],
        "algebra": [linear_equation, root_squares, system_product, composition, series_sum],
        "number_theory": [
            divisor_count,
            power_mod,
            lcm_minus_gcd,
            digit_sum_power,
            divisible_by_either,
            modular_inverse,
        ],
        "combinatorics": [
            committee,
            word_arrangements,
            grid_paths_avoiding,
            dice_sum,
            derangements,
            stars_and_bars,
        ],
    }.items()
    for f in fs
}


def generate(per_template: int = PER_TEMPLATE, seed: int = SEED) -> dict[str, list[dict]]:
    """All rows, split into {"train": [...], "test": [...]}; distinct questions only."""
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    for name, (topic, make) in TEMPLATES.items():
        rng = random.Random(f"{seed}:{name}")
        seen: set[str] = set()
        for _ in range(per_template * 20):
            if len(seen) == per_template:
                break
            question, answer, params = make(rng)
            if question in seen:
                continue
            seen.add(question)
            row = {
                "id": f"{name}-{len(seen)}",
                "question": question,
                "answer": answer,
                "topic": topic,
                "template": name,
                "params": params,
            }
            splits[_split_of(question)].append(row)
    return splits


def _split_of(question: str) -> str:
    bucket = int.from_bytes(hashlib.sha256(question.encode()).digest()[:4], "big") % 100
    return "test" if bucket < TEST_PERCENT else "train"


def write(out_dir: Path = DATA_DIR) -> dict[str, int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, rows in generate().items():
        with (out_dir / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        counts[split] = len(rows)
    return counts


if __name__ == "__main__":
    print(write())
