"""The environment suite: text environments registered with Gymnasium under the `gspo` namespace.

import envs
env = envs.make("arithmetic")            # or "gspo/Arithmetic-v0", or a user's "myenv/Echo-v0"
tasks = env.load_tasks("train")
messages, info = env.reset(options={"task": tasks[0]})
messages, reward, terminated, truncated, info = env.step("\\boxed{42}")
"""

from envs.base import Message, TextEnv
from envs.errors import EnvError, InfraError, TaskError
from envs.registry import (
    ENTRY_POINT_GROUP,
    SHORT_NAMES,
    env_class,
    load_plugins,
    make,
    register_builtin_envs,
    registered_ids,
    resolve_id,
)

register_builtin_envs()

__all__ = [
    "ENTRY_POINT_GROUP",
    "SHORT_NAMES",
    "EnvError",
    "InfraError",
    "Message",
    "TaskError",
    "TextEnv",
    "env_class",
    "load_plugins",
    "make",
    "register_builtin_envs",
    "registered_ids",
    "resolve_id",
]
