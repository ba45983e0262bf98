"""Authoring record for one shipped problem (used only by build_problemset.py, never at load time).

A spec holds the statement, the reference solutions and the *inputs* of its tests: fixed edge
cases plus a seeded generator. Expected outputs are produced by running the Python reference and
cross-checked against the C++ reference, then committed under envs/data/codeforces/<id>/.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

Generator = Callable[[random.Random], str]


@dataclass(slots=True)
class Spec:
    id: str
    title: str
    tier: str  # "easy" | "medium"
    legend: str
    input_spec: str
    output_spec: str
    samples: list[str]
    edge: list[str]
    py: str
    cpp: str
    gen: Generator | None = None
    n_generated: int = 8
    time_limit_s: float = 2.0
    memory_mb: int = 256
    judge: dict = field(default_factory=lambda: {"mode": "tokens"})
    checker: str | None = None  # Python checker source (argv: input, output, answer; exit 0 = OK)
    tags: list[str] = field(default_factory=list)

    def statement(self) -> str:
        return f"{self.legend.strip()}\n\nInput\n{self.input_spec.strip()}\n\nOutput\n{self.output_spec.strip()}\n"


def ints(xs) -> str:
    return " ".join(str(x) for x in xs)


def lines(*rows) -> str:
    return "\n".join(str(r) for r in rows) + "\n"


def word(rng: random.Random, n: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))
