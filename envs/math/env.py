"""Math-v0: a single-turn math problem; the last `\\boxed{}` of the answer is checked by math-verify.

Scoring: 1.0 when math-verify finds the boxed answer equivalent to the gold answer (1/2, 0.5 and
\\frac{1}{2} are the same), else 0.0 -- including no boxed answer, an unreadable one, or one
longer than `max_answer_chars`. An answer that makes the verifier time out, blow up or crash
(`\\boxed{2^{2^{30}}}`, deep nesting) is the model's doing: reward 0 with
`info["verify_error"]` saying what happened (counted as rollout/verify_errors). A gold answer
math-verify cannot read raises TaskError; a broken verifier pool raises InfraError. Neither is
ever a reward of 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.base import Message, TextEnv
from envs.errors import TaskError
from envs.math.boxed import aextract_answer, clean_text, extract_boxed
from envs.math.data import SPLITS, builtin_tasks, load_math_file
from envs.math.verify import DEFAULT_TIMEOUT_S, Verification, VerifierPool, shared_pool

DEFAULT_PROMPT = "{question}\n\nPut your final answer in \\boxed{{}}."


SHIPPED = "shipped"  # train_path/test_path value that selects the shipped split explicitly


class MathEnv(TextEnv):
    """Single-turn math with exact answers.

    Data: train_path / test_path (env.kwargs.train_path=PATH on the command line) name a .jsonl
    or .parquet file of rows in a shape envs/math/data.py lists ({"question", "answer"},
    GSM8K's "#### N" answers, or a "solution" with \\boxed{}). With neither, both splits are the
    shipped generated set. Giving only one is an error when the other split is loaded (say
    "shipped" to mean the shipped one). Gold answers of a user file are checked with math-verify
    at load time; an unreadable one raises TaskError naming the row.
    """

    def __init__(
        self,
        *,
        train_path: str | Path | None = None,
        test_path: str | Path | None = None,
        prompt_template: str = DEFAULT_PROMPT,
        verify_timeout_s: float = DEFAULT_TIMEOUT_S,
        verifier_workers: int = 2,
        max_answer_chars: int = 2000,
        pool: VerifierPool | None = None,
        max_turns: int = 1,
    ) -> None:
        super().__init__(max_turns=max_turns)
        if "{question}" not in prompt_template:
            raise ValueError(
                f"prompt_template must contain '{{question}}', got {prompt_template!r}"
            )
        if verify_timeout_s <= 0:
            raise ValueError(f"verify_timeout_s must be > 0, got {verify_timeout_s}")
        self.paths = {"train": train_path, "test": test_path}
        self.prompt_template = prompt_template
        self.verify_timeout_s = verify_timeout_s
        self.max_answer_chars = max_answer_chars
        self._pool = pool
        self._verifier_workers = verifier_workers

    @property
    def pool(self) -> VerifierPool:
        if self._pool is None:  # created on first use: making an env starts no processes
            self._pool = shared_pool(self._verifier_workers)
        return self._pool

    # -- data -----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        path = self.paths[split]
        other = self.paths["test" if split == "train" else "train"]
        if path is None and other not in (None, SHIPPED):
            raise ValueError(
                f"env.kwargs.{'train' if split == 'test' else 'test'}_path is set but "
                f"{split}_path is not: set env.kwargs.{split}_path=PATH, or "
                f"env.kwargs.{split}_path={SHIPPED} to use the shipped {split} split"
            )
        if path is None or path == SHIPPED:
            return builtin_tasks(split)
        rows = load_math_file(path)
        self.check_gold_answers(rows, source=str(path))
        return rows

    def reference_response(self, task: dict[str, Any]) -> str:
        return f"The answer is \\boxed{{{task['answer']}}}."

    def check_gold_answers(self, rows: list[dict[str, Any]], source: str = "rows") -> None:
        """Raise TaskError naming every row whose gold answer math-verify cannot read."""
        bad = [r for r in rows if not self.pool.verify(r["answer"], r["answer"]).gold_ok]
        if bad:
            shown = ", ".join(f"id {r['id']!r} (answer {r['answer'][:40]!r})" for r in bad[:10])
            raise TaskError(
                f"{source}: {len(bad)} gold answer(s) math-verify cannot read: {shown}"
                f"{' ...' if len(bad) > 10 else ''}; fix the 'answer' (or the \\boxed{{}} in "
                "'solution') of these rows"
            )

    # -- episode --------------------------------------------------------------------------------
    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        return [{"role": "user", "content": self.prompt_template.format(question=task["question"])}]

    def step(self, action: str):
        task = self._require_task()
        self.turn += 1
        parsed = self._extract(action)
        verification = None
        if parsed is not None and len(parsed) <= self.max_answer_chars:
            verification = self.pool.verify(task["answer"], parsed, timeout_s=self.verify_timeout_s)
        return self._finish(task, parsed, verification)

    async def astep(self, action: str):
        task = self._require_task()
        self.turn += 1
        parsed = await aextract_answer(action)
        verification = None
        if parsed is not None and len(parsed) <= self.max_answer_chars:
            verification = await self.pool.averify(
                task["answer"], parsed, timeout_s=self.verify_timeout_s
            )
        return self._finish(task, parsed, verification)

    # -- scoring --------------------------------------------------------------------------------
    @staticmethod
    def _extract(action: str) -> str | None:
        return extract_boxed(clean_text(action))

    def _finish(self, task: dict[str, Any], parsed: str | None, verification: Verification | None):
        """Scored outcome of a final answer (shared by step and astep)."""
        if verification is not None and not verification.gold_ok:
            raise TaskError(
                f"task {task.get('id')!r}: gold answer {task['answer']!r} cannot be parsed by "
                "math-verify; fix its 'answer' (or the \\boxed{} in its 'solution')"
            )
        correct = verification is not None and verification.correct
        reward = 1.0 if correct else 0.0
        info = {
            "parsed_answer": parsed,
            "format_ok": parsed is not None,
            "answer_parsed": verification is not None and verification.pred_ok,
            "correct": correct,
            "gold": task["answer"],
            "turn_reward": reward,
        }
        if parsed is None:
            info["reason"] = "no_boxed_answer"
        elif len(parsed) > self.max_answer_chars:
            info["reason"] = "answer_too_long"
        elif verification is not None and verification.error:
            info["reason"] = "verify_error"
            info["verify_error"] = verification.error
        return [], reward, True, False, info
