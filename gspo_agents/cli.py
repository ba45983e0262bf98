"""The command-line wrapper of the entry points (train, eval, sft): errors people can act on.

- Overrides are checked before Hydra composes anything and before torch is imported
  (`env=arithmetc` and `trainer.total_steps=5` get a "did you mean" in well under a second).
- A user-facing error ends in one `error: ...` line and exit status 1: a bad config, a busy or
  unwritable run dir, an unreadable checkpoint, a run that stalled on failing trajectories, an
  unknown env id, missing or malformed task data, an SGLang engine that does not answer, a
  sandbox backend that cannot run here (no Docker daemon). A bug still shows its traceback, and
  so does everything with `--debug` (or HYDRA_FULL_ERROR=1).
- Ctrl-C outside the training loop (model build, cold start) ends in one line, exit status 130.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

# module -> the exceptions of it that mean "the user can fix this" (each message names the fix).
# Looked up only among modules already imported: an exception of a module that was never
# imported cannot have been raised, and importing it here would pull in torch before a typo in
# the overrides is reported.
USER_ERRORS: dict[str, tuple[str, ...]] = {
    "gspo_agents.config": ("ConfigError",),
    "gspo_agents.learner.errors": ("CheckpointError",),
    "gspo_agents.models": ("ModelConfigError",),
    "gspo_agents.rundir": ("RunDirError",),
    "gspo_agents.step_errors": ("RunStalled",),
    "gspo_agents.rollout.engine": ("EngineUnavailable",),
    "envs.errors": ("TaskError", "UnknownEnv", "MissingData"),
    "sandbox.errors": ("SandboxUnavailable",),
}


def user_errors() -> tuple[type[BaseException], ...]:
    found = []
    for module, names in USER_ERRORS.items():
        loaded = sys.modules.get(module)
        found += [getattr(loaded, n) for n in names if loaded is not None and hasattr(loaded, n)]
    return tuple(found)


def debug_requested(argv: list[str] | None = None) -> bool:
    argv = sys.argv[1:] if argv is None else argv
    return "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"


def take_debug_flag() -> bool:
    """Remove `--debug` from sys.argv (Hydra does not know it) and make Hydra print in full."""
    if "--debug" not in sys.argv[1:]:
        return debug_requested()
    sys.argv = [a for a in sys.argv if a != "--debug"]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    return True


def program_name() -> str:
    """`gspo-train` when run as the installed script, `python -m gspo_agents.train` otherwise."""
    name = os.path.basename(sys.argv[0])
    if name.endswith(".py"):
        return f"python -m gspo_agents.{name[:-3]}"
    return name


def say_error(exc: BaseException) -> None:
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"error: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def user_errors_as_one_line() -> Iterator[None]:
    """Inside the Hydra task function (Hydra prints a traceback for anything that escapes it)."""
    try:
        yield
    except Exception as exc:
        if debug_requested() or not isinstance(exc, user_errors()):
            raise
        say_error(exc)
        sys.exit(1)


def run_cli(hydra_main: Callable[[], None], check_overrides: Callable[[list[str]], None]) -> None:
    from gspo_agents.config import expand_shorthands

    debug = take_debug_flag()
    sys.argv[1:] = expand_shorthands(sys.argv[1:])
    try:
        check_overrides(sys.argv[1:])
        from gspo_agents.cli_help import print_help_if_asked

        print_help_if_asked(program_name())
        hydra_main()
    except Exception as exc:
        if debug or not isinstance(exc, user_errors()):
            raise
        say_error(exc)
        sys.exit(1)
    except KeyboardInterrupt:
        print(
            "\ninterrupted before the first training step: nothing to checkpoint. A cold start "
            "that finished is cached and reused; one cut short starts over. Run the same "
            "command again to start.",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(130)
