"""The sandbox package's exceptions.

SandboxError                  base of everything the sandbox raises
├── SandboxUnavailable        the requested backend cannot isolate on this machine (names the fix)
├── ImageBuildError           the offline image/rootfs build failed
└── BackendFailure            a backend broke mid-run (container died, runner crashed); the public
                              `Sandbox.run` turns it into Verdict.SE, never into a wrong answer
User mistakes (an unknown language, a negative limit) raise ValueError subclasses instead.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class of all sandbox errors."""


class SandboxUnavailable(SandboxError):
    """The requested backend cannot isolate on this machine; the message says what is missing."""


class ImageBuildError(SandboxError):
    """Building the sandbox root filesystem or Docker image failed."""


class BackendFailure(SandboxError):
    """Infrastructure failure during a run: reported to callers as Verdict.SE."""
