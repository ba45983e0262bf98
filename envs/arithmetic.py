"""Arithmetic-v0: integer arithmetic with exact answers in `\\boxed{}`; the learning-signal demo.

Built for a ~1-3M-parameter model trained on a 2-core CPU in minutes: prompts are a few tokens
("Compute 12+7."), scoring is an exact integer comparison (no math-verify, no processes), and
difficulty is a dial (`difficulty` presets, or `max_operand` / `operators` / `num_operands`).
`reference_response` gives a short correct answer for cold-start SFT.

Train and test are disjoint by construction: every expression is assigned to a split by a hash
of its text, then each split samples its own problems with a seeded generator.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any

from envs.base import Message, TextEnv
from envs.math.boxed import clean_text, extract_boxed


@dataclass(frozen=True, slots=True)
class Level:
    max_operand: int
    operators: str
    num_operands: int


# difficulty -> preset; explicit keyword arguments override any field.
LEVELS: dict[int, Level] = {
    1: Level(max_operand=9, operators="+", num_operands=2),
    2: Level(max_operand=9, operators="+-", num_operands=2),
    3: Level(max_operand=99, operators="+-", num_operands=2),
    4: Level(max_operand=99, operators="+-*", num_operands=2),
    5: Level(max_operand=99, operators="+-*", num_operands=3),
}
_INTEGER = re.compile(r"[+-]?\d{1,30}")
_TEST_BUCKETS = 5  # 1 in 5 expressions belong to the test split


class ArithmeticEnv(TextEnv):
    """Single-turn: one user message with an expression; reward 1.0 iff `\\boxed{n}` is exact.

    The defaults (one-digit addition, 32 training expressions) are the CPU learning demo: a ~1M
    parameter model, briefly cold-started, measurably improves under GSPO within minutes.
    Raise `difficulty` / `num_train` for harder variants.
    """

    def __init__(
        self,
        difficulty: int = 1,
        *,
        max_operand: int | None = None,
        operators: str | None = None,
        num_operands: int | None = None,
        num_train: int = 32,
        num_test: int = 200,
        seed: int = 0,
        show_work: bool = False,
        prompt_template: str = "Compute {expr}.",
    ) -> None:
        super().__init__(max_turns=1)
        if difficulty not in LEVELS:
            raise ValueError(f"difficulty must be one of {sorted(LEVELS)}, got {difficulty!r}")
        base = LEVELS[difficulty]
        self.level = Level(
            max_operand=base.max_operand if max_operand is None else max_operand,
            operators=base.operators if operators is None else operators,
            num_operands=base.num_operands if num_operands is None else num_operands,
        )
        _validate(self.level)
        if "{expr}" not in prompt_template:
            raise ValueError(f"prompt_template must contain '{{expr}}', got {prompt_template!r}")
        self.num_train, self.num_test, self.seed = num_train, num_test, seed
        self.show_work = show_work
        self.prompt_template = prompt_template

    # -- data -----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        want = self.num_train if split == "train" else self.num_test
        # Distinct seed streams per split; the hash split keeps them disjoint regardless.
        rng = random.Random(f"arithmetic:{self.seed}:{split}")
        rows: dict[str, dict[str, Any]] = {}
        for _ in range(want * 50):  # small spaces (1-digit addition) run out: take what exists
            if len(rows) == want:
                break
            operands = [
                rng.randint(0, self.level.max_operand) for _ in range(self.level.num_operands)
            ]
            ops = [rng.choice(self.level.operators) for _ in range(self.level.num_operands - 1)]
            expr = _format(operands, ops)
            if expr not in rows and _split_of(expr) == split:
                rows[expr] = {
                    "id": f"{split}-{len(rows)}",
                    "expr": expr,
                    "answer": _eval(operands, ops),
                }
        return list(rows.values())

    def reference_response(self, task: dict[str, Any]) -> str:
        answer = int(task["answer"])
        if self.show_work and self.level.num_operands > 2:
            return f"{_worked_steps(task['expr'])} \\boxed{{{answer}}}"
        return f"\\boxed{{{answer}}}"

    # -- episode --------------------------------------------------------------------------------
    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        return [{"role": "user", "content": self.prompt_template.format(expr=task["expr"])}]

    def step(self, action: str):
        task = self._require_task()
        self.turn += 1
        parsed = extract_boxed(clean_text(action))
        digits = parsed.replace(" ", "") if parsed is not None else ""
        format_ok = _INTEGER.fullmatch(digits) is not None
        correct = format_ok and int(digits) == int(task["answer"])
        reward = 1.0 if correct else 0.0
        info = {
            "parsed_answer": parsed,
            "format_ok": format_ok,
            "correct": correct,
            "expected": int(task["answer"]),
            "turn_reward": reward,
        }
        return [], reward, True, False, info

    async def astep(self, action: str):
        if isinstance(action, str) and len(action) <= 1 << 16:
            return self.step(action)  # microseconds of string work: no thread hop needed
        return await asyncio.to_thread(self.step, action)  # megabytes of output: off the loop


def _validate(level: Level) -> None:
    if level.max_operand < 1:
        raise ValueError(f"max_operand must be >= 1, got {level.max_operand}")
    if not level.operators or set(level.operators) - set("+-*"):
        raise ValueError(
            f"operators must be a non-empty string over '+-*', got {level.operators!r}"
        )
    if level.num_operands < 2:
        raise ValueError(f"num_operands must be >= 2, got {level.num_operands}")


def _format(operands: list[int], ops: list[str]) -> str:
    parts = [str(operands[0])]
    for op, x in zip(ops, operands[1:]):
        parts += [op, str(x)]
    return "".join(parts)


def _eval(operands: list[int], ops: list[str]) -> int:
    """Standard precedence: products first, then left-to-right sums (no eval())."""
    terms, signs = [operands[0]], []
    for op, x in zip(ops, operands[1:]):
        if op == "*":
            terms[-1] *= x
        else:
            terms.append(x)
            signs.append(op)
    total = terms[0]
    for sign, term in zip(signs, terms[1:]):
        total = total + term if sign == "+" else total - term
    return total


def _worked_steps(expr: str) -> str:
    """'3+4*5' -> '4*5=20, 3+20=23.' : one short step per operator, precedence respected."""
    tokens = re.findall(r"\d+|[+*-]", expr)
    steps: list[str] = []
    while "*" in tokens:
        i = tokens.index("*")
        value = int(tokens[i - 1]) * int(tokens[i + 1])
        steps.append(f"{tokens[i - 1]}*{tokens[i + 1]}={value}")
        tokens[i - 1 : i + 2] = [str(value)]
    while len(tokens) > 1:
        a, op, b = int(tokens[0]), tokens[1], int(tokens[2])
        value = a + b if op == "+" else a - b
        steps.append(f"{a}{op}{b}={value}")
        tokens[0:3] = [str(value)]
    return ", ".join(steps) + "."


def _split_of(expr: str) -> str:
    bucket = hashlib.sha256(expr.encode()).digest()[0] % _TEST_BUCKETS
    return "test" if bucket == 0 else "train"
