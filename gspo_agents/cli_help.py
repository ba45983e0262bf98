"""`--help` of the Hydra entry points (gspo-train, gspo-eval, gspo-sft): the config groups with
their options, and every key with its type, its default and a one-line description.

The descriptions are the schemas' own comments in gspo_agents/config.py (and the rollout record):
the comment at the end of a field's line, else the comment lines just above it, else the first
line of the field's dataclass docstring for a nested group. One source for the code and the help,
and tests/test_cli_help.py fails when a key has none. Imports no torch: help comes in a second.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from typing import Any

FIELD = re.compile(r"^\s+(\w+):\s*[^=]+?(?:=\s*(.*?))?\s*$")


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment that describes it in the class's source."""
    source_cls = getattr(cls, "_source_record", cls)
    try:
        lines = inspect.getsource(source_cls).splitlines()
    except (OSError, TypeError):
        return {}
    names = {f.name for f in dataclasses.fields(cls)}
    found: dict[str, str] = {}
    above: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# ").strip())
            continue
        code, _, trailing = line.partition("  # ")
        match = FIELD.match(code)
        if match and match.group(1) in names and match.group(1) not in found:
            comment = trailing.strip()
            if not comment and code.rstrip().endswith("("):  # a default split over lines
                for cont in lines[i + 1 : i + 4]:
                    if "  # " in cont:
                        comment = cont.partition("  # ")[2].strip()
                        break
            found[match.group(1)] = comment or " ".join(above)
        above = []
    return found


def type_name(hint: Any) -> str:
    text = str(hint) if not isinstance(hint, type) else hint.__name__
    text = text.replace("typing.", "").replace("NoneType", "None")
    return re.sub(r"Optional\[(.*)\]", r"\1 | None", text)


def describe_keys(schema: type, cfg: Any, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) of every leaf key under `schema`, defaults from `cfg`
    (the composed config, so an env's YAML shows its own values)."""
    rows = []
    hints = typing.get_type_hints(schema)
    comments = field_comments(schema)
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        hint = hints[f.name]
        value = cfg.get(f.name) if cfg is not None else None
        if dataclasses.is_dataclass(hint):
            rows += describe_keys(hint, value, key + ".")  # type: ignore[arg-type]
            continue
        rows.append((key, type_name(hint), _show(value), one_line(comments.get(f.name, ""))))
    return rows


def one_line(text: str, limit: int = 100) -> str:
    """The first sentence, at most `limit` characters."""
    first = re.split(r"(?<=[.;])\s", text, maxsplit=1)[0].rstrip(".;")
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


def _show(value: Any) -> str:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return str(OmegaConf.to_container(value, resolve=False))
    return "null" if value is None else str(value)


def help_text(prog: str, overrides: list[str]) -> str:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from gspo_agents.config import CONFIG_DIR, RunConfig, config_groups, register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    OmegaConf.set_readonly(cfg, False)
    chosen = _chosen_options(overrides)
    lines = [
        f"usage: {prog} [GROUP=OPTION ...] [KEY=VALUE ...] [--debug] [--cfg job]",
        "",
        "A typo in a group, option or key is rejected with the closest valid name. --debug (or",
        "HYDRA_FULL_ERROR=1) shows the full traceback of an error. --cfg job prints the composed",
        "config. Docs: README.md, docs/.",
        "",
        "config groups (GROUP=OPTION; the default first):",
    ]
    defaults = {"model": "tiny", "engine": "local", "sandbox": "auto", "algorithm": "gspo"}
    defaults |= {"trainer": "default", "logger": "default", "env": "arithmetic"}
    for group, options in sorted(config_groups().items()):
        first = chosen.get(group, defaults.get(group, ""))
        ordered = [first] + [o for o in options if o != first] if first in options else options
        lines.append(f"  {group:<10} {', '.join(ordered)}")
    shown = " ".join(overrides) or "the defaults"
    lines += ["", f"keys (KEY=VALUE; defaults as composed from {shown}):"]
    rows = describe_keys(RunConfig, cfg)
    width = max(len(f"{k}: {t}") for k, t, _, _ in rows)
    group = ""
    for key, hint, default, text in rows:
        if key.split(".")[0] != group:
            group = key.split(".")[0]
            lines.append(f"  [{group}]")
        left = f"{key}: {hint}"
        lines.append(f"    {left:<{width}} = {default:<12}  {text}".rstrip())
    return "\n".join(lines)


def _chosen_options(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides if "=" in o and "." not in o.split("=")[0])


def print_help_if_asked(prog: str) -> None:
    """`-h`/`--help` (Hydra's generic page otherwise): ours, then exit 0."""
    args = sys.argv[1:]
    if "--help" not in args and "-h" not in args:
        return
    overrides = [a for a in args if not a.startswith("-")]
    print(help_text(prog, overrides))
    sys.exit(0)
