"""The command-line wrapper of the entry points (train, eval, sft): errors people can act on.

- Overrides are checked before Hydra composes anything (`env=arithmetc` gets "did you mean").
- A user-facing error (bad config, busy or read-only run dir, unreadable checkpoint, a run that
  stalled on failing trajectories) ends in one `error: ...` line and exit status 1; a bug still
  shows its full traceback.
- Ctrl-C outside the training loop (model build, cold start) ends in one line, exit status 130.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


def user_errors() -> tuple[type[BaseException], ...]:
    from gspo_agents.config import ConfigError
    from gspo_agents.learner.errors import CheckpointError
    from gspo_agents.models import ModelConfigError
    from gspo_agents.rundir import RunDirError
    from gspo_agents.step_errors import RunStalled

    return (ConfigError, CheckpointError, ModelConfigError, RunDirError, RunStalled)


@contextlib.contextmanager
def user_errors_as_one_line() -> Iterator[None]:
    """Inside the Hydra task function (Hydra prints a traceback for anything that escapes it)."""
    try:
        yield
    except user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


def run_cli(hydra_main: Callable[[], None], check_overrides: Callable[[list[str]], None]) -> None:
    try:
        check_overrides(sys.argv[1:])
        hydra_main()
    except user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        print(
            "\ninterrupted before training reached a step boundary: nothing to checkpoint. "
            "Run the same command again to start (cached stages are reused).",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(130)
