"""ArithmeticChain-v0: several arithmetic questions in one episode, one per turn; per-turn rewards.

The multi-turn task on which GSPO-token's per-turn credit differs from GSPO's one advantage per
sequence: turn k asks question k, its turn reward is 1/K when `\\boxed{n}` is exact, and the
episode's reward (returned by the terminating step) is the sum of its turn rewards, the share of
questions answered. GSPO credits every turn with the episode's outcome; GSPO-token credits turn k
only with the rewards from turn k on (`gspo_agents.advantages.turn_advantages`).

Questions come from Arithmetic-v0's split (same difficulty dials, same disjoint train/test), drawn
with a seeded generator, so a chain task is reproducible. `reference_response` answers the first
question: cold-start SFT teaches the answer format, which later turns reuse.
"""

from __future__ import annotations

import random
from typing import Any

from envs.arithmetic import _INTEGER, ArithmeticEnv
from envs.base import Message
from envs.math.boxed import clean_text, extract_boxed


class ArithmeticChainEnv(ArithmeticEnv):
    """`num_questions` questions, one per assistant turn; reward = share answered exactly."""

    def __init__(self, difficulty: int = 1, *, num_questions: int = 3, **kwargs: Any) -> None:
        super().__init__(difficulty, **kwargs)
        if num_questions < 1:
            raise ValueError(f"num_questions must be >= 1, got {num_questions}")
        self.num_questions = num_questions
        self.max_turns = num_questions
        self._correct = 0

    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        questions = super().load_tasks(split)
        want = self.num_train if split == "train" else self.num_test
        rng = random.Random(f"arithmetic_chain:{self.seed}:{split}:{self.num_questions}")
        rows = []
        for i in range(want):
            chosen = [rng.choice(questions) for _ in range(self.num_questions)]
            rows.append(
                {
                    "id": f"{split}-chain-{i}",
                    "exprs": [q["expr"] for q in chosen],
                    "answers": [q["answer"] for q in chosen],
                    # the first question, for the single-turn views (SFT's reference answer)
                    "expr": chosen[0]["expr"],
                    "answer": chosen[0]["answer"],
                }
            )
        return rows

    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        self._correct = 0
        return [self._question(task, 0)]

    def _question(self, task: dict[str, Any], k: int) -> Message:
        return {"role": "user", "content": self.prompt_template.format(expr=task["exprs"][k])}

    def step(self, action: str):
        task = self._require_task()
        k = self.turn  # the question this turn answers
        self.turn += 1
        info = _score(extract_boxed(clean_text(action)), int(task["answers"][k]))
        turn_reward = (1.0 / self.num_questions) if info["correct"] else 0.0
        self._correct += int(info["correct"])
        info = {**info, "turn": self.turn, "turn_reward": turn_reward}
        if self.turn >= self.num_questions:
            return [], self._correct / self.num_questions, True, False, info
        return [self._question(task, self.turn)], 0.0, False, False, info


def _score(parsed: str | None, expected: int) -> dict[str, Any]:
    digits = parsed.replace(" ", "") if parsed is not None else ""
    format_ok = _INTEGER.fullmatch(digits) is not None
    return {
        "parsed_answer": parsed,
        "format_ok": format_ok,
        "correct": format_ok and int(digits) == expected,
        "expected": expected,
    }
