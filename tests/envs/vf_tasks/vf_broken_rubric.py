"""A verifiers taskset whose rubric raises on every trace (an infrastructure failure)."""

import verifiers.v1 as vf


class BrokenTask(vf.Task[vf.TaskData]):
    @vf.reward
    async def grader(self, trace: vf.Trace) -> float:
        raise ConnectionError("the grading service is down")


class BrokenTaskset(vf.Taskset[BrokenTask, vf.TasksetConfig]):
    def load(self) -> list[BrokenTask]:
        return [BrokenTask(vf.TaskData(prompt="Say anything."), self.config.task)]


__all__ = ["BrokenTaskset"]
