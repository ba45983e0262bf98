"""gspo-agents: train LLM agents with GSPO on sandboxed code and math environments.

from gspo_agents import Trainer
Trainer("env=arithmetic", "trainer.steps=20").fit()   # the CLI's overrides, in Python
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Trainer", "__version__"]

if TYPE_CHECKING:
    from gspo_agents.api import Trainer


def __getattr__(name: str) -> Any:  # `import gspo_agents` stays light: torch loads on use
    if name == "Trainer":
        from gspo_agents.api import Trainer

        return Trainer
    raise AttributeError(f"module 'gspo_agents' has no attribute {name!r}")
