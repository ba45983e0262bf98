"""The default taskset of `env=verifiers` (a verifiers 0.4 package, as `vf init` writes one):
one-digit sums; the reward is whether the reply's last number is the sum."""

import re

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: int


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        numbers = re.findall(r"-?\d+", trace.last_reply)
        return 1.0 if numbers and int(numbers[-1]) == self.data.answer else 0.0


class SumConfig(vf.TasksetConfig):
    num_tasks: int = 16


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self) -> list[SumTask]:
        pairs = [(a, b) for a in range(1, 10) for b in range(1, 10)][:: 81 // self.config.num_tasks]
        return [
            SumTask(SumData(prompt=f"{a} + {b} = ?", answer=a + b), self.config.task)
            for a, b in pairs[: self.config.num_tasks]
        ]


__all__ = ["SumTaskset"]
