"""A multi-turn verifiers taskset with a tool server (verifiers 0.4.0's `vf.Toolset`, the way
`vf init --tool` scaffolds one): the model adds two numbers with the `add` tool, then answers.
The reward is whether the final reply holds the sum; a `@vf.stop` ends the episode once the
tool has been called three times."""

import verifiers.v1 as vf


class AddToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b


class CalcData(vf.TaskData):
    a: int
    b: int


class CalcTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class CalcTask(vf.Task[CalcData, vf.State, CalcTaskConfig]):
    @classmethod
    def toolsets(cls, config: CalcTaskConfig) -> list[vf.Toolset]:
        return [AddToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if str(self.data.a + self.data.b) in trace.last_reply else 0.0

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))

    @vf.stop
    async def three_calls(self, trace: vf.Trace) -> bool:
        return len(trace.tool_messages) >= 3


class CalcConfig(vf.TasksetConfig):
    task: CalcTaskConfig = CalcTaskConfig()


class CalcTaskset(vf.Taskset[CalcTask, CalcConfig]):
    def load(self) -> list[CalcTask]:
        pairs = [(2, 3), (4, 1), (5, 5), (7, 2)]
        return [
            CalcTask(
                CalcData(prompt=f"What is {a} + {b}? Use the tool.", a=a, b=b), self.config.task
            )
            for a, b in pairs
        ]


__all__ = ["CalcTaskset"]
