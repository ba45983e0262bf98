"""A single-turn verifiers taskset, written as `vf init` scaffolds one (verifiers 0.4.0): the
model is asked to write a word; the reward is whether its reply contains it."""

import verifiers.v1 as vf

WORDS = ("cat", "dog", "sun", "red")


class SayWordData(vf.TaskData):
    answer: str


class SayWordTask(vf.Task[SayWordData]):
    @vf.reward(weight=1.0)
    async def says_the_word(self, trace: vf.Trace) -> float:
        return 1.0 if self.data.answer in trace.last_reply else 0.0

    @vf.reward(weight=0.5)
    async def short(self, trace: vf.Trace) -> float:
        return 1.0 - min(len(trace.last_reply), 400) / 400


class SayWordConfig(vf.TasksetConfig):
    num_tasks: int = 4


class SayWordTaskset(vf.Taskset[SayWordTask, SayWordConfig]):
    def load(self) -> list[SayWordTask]:
        return [
            SayWordTask(SayWordData(prompt=f"Write the word {w}.", answer=w), self.config.task)
            for w in WORDS[: self.config.num_tasks]
        ]


__all__ = ["SayWordTaskset"]
