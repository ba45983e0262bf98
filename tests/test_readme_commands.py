"""Every `python -m gspo_agents.{train,eval,sft}` command in the README still parses: its
overrides pass the CLI's checks and compose into a valid config (the cheap variant of running
them; tests/test_api.py runs the README's Python example, tests/integration the default run).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from gspo_agents.config import (
    CONFIG_DIR,
    check_choices,
    check_overrides,
    expand_shorthands,
    register_schemas,
)

README = Path(__file__).resolve().parents[1] / "README.md"
ENTRY = re.compile(r"python -m gspo_agents\.(train|eval|sft)\b")


def readme_commands() -> list[tuple[str, list[str]]]:
    """(entry point, overrides) of each command in the README's code blocks and inline code."""
    text = README.read_text()
    text = text.replace("\\\n", " ")  # continued lines
    found = []
    for line in text.splitlines():
        for chunk in re.split(r"`|&&", line):
            match = ENTRY.search(chunk)
            if not match:
                continue
            words = shlex.split(chunk[match.end() :].split("#")[0])
            overrides = [w for w in words if "=" in w and not w.startswith("-")]
            found.append((match.group(1), overrides))
    return found


COMMANDS = readme_commands()
PLACEHOLDERS = {"eval.model_path=DIR": "eval.model_path=/tmp/model"}


def test_the_readme_has_the_commands_this_checks():
    assert len(COMMANDS) >= 10, COMMANDS
    assert ("train", []) in COMMANDS and ("eval", ["env=math", "eval.model_path=DIR"]) in COMMANDS


@pytest.mark.parametrize(
    ("entry", "overrides"), COMMANDS, ids=[" ".join([e, *o])[:60] for e, o in COMMANDS]
)
def test_readme_command_parses(entry, overrides, tmp_path, monkeypatch):
    overrides = [PLACEHOLDERS.get(o, o) for o in overrides if not o.startswith("env.name=myenv/")]
    overrides = expand_shorthands(overrides)
    if "agent.entry=my_agent:agent" in overrides:  # the README's agent file, where it says
        from test_agent_cli import readme_agent_file

        (tmp_path / "my_agent.py").write_text(readme_agent_file())
        monkeypatch.syspath_prepend(str(tmp_path))
    check_overrides(overrides)
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    check_choices(cfg)
