"""Exceptions of the environment suite.

EnvError
├── TaskError         a task row is malformed (e.g. unparseable gold answer): fix the data
└── InfraError        the sandbox or verifier failed; the trajectory is marked error, never
                      scored as reward 0 (the rollout manager counts and drops or retries it)
"""


class EnvError(Exception):
    """Base of environment failures."""


class TaskError(EnvError, ValueError):
    """A task row cannot be used as given; the message names the field and the fix."""


class InfraError(EnvError):
    """Infrastructure failed while scoring (sandbox died, verifier timed out)."""
