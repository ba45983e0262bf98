"""Exceptions of the environment suite.

EnvError
├── UnknownEnv        no env is registered under that name or id (lists the valid ones)
├── MissingData       a task data file or directory does not exist (also a FileNotFoundError)
├── TaskError         a task row is malformed (e.g. unparseable gold answer): fix the data
└── InfraError        the sandbox or verifier failed; the trajectory is marked error, never
                      scored as reward 0 (the rollout manager counts and drops or retries it)
"""


class EnvError(Exception):
    """Base of environment failures."""


class UnknownEnv(EnvError, ValueError):
    """No environment is registered under the name; the message lists close and valid names."""


class MissingData(FileNotFoundError, EnvError):
    """A task data file or directory the env was pointed at does not exist."""


class TaskError(EnvError, ValueError):
    """A task row cannot be used as given; the message names the field and the fix."""


class InfraError(EnvError):
    """Infrastructure failed while scoring (sandbox died, verifier timed out)."""
