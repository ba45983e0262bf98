"""Tool calling for environments: typed callables -> JSON schemas, tool-call parsers, ToolEnv.

    from envs.tools import ToolEnv, ToolError, tool

See envs/README_custom_env.md for a complete tool env in under 50 lines.
"""

from envs.tools.env import ToolEnv, ToolError, tool
from envs.tools.parsers import (
    CallError,
    ParsedTurn,
    ToolCall,
    get_parser,
    parse_hermes,
    parser_names,
    register_parser,
)
from envs.tools.schema import ArgumentError, Tool, tool_schema

__all__ = [
    "ArgumentError",
    "CallError",
    "ParsedTurn",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolError",
    "get_parser",
    "parse_hermes",
    "parser_names",
    "register_parser",
    "tool",
    "tool_schema",
]
