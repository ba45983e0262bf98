"""gspo-agents: train LLM agents with GSPO on sandboxed code and math environments."""

__version__ = "0.1.0"
