"""`SandboxConfig`: the sandbox's own small config schema (what a Hydra `sandbox/` group holds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    backend: str = "auto"  # auto | docker | bubblewrap | namespaces | unsafe-local | remote
    max_concurrency: int = 4
    allow_unsafe_local: bool = False
    docker_hosts: tuple[str, ...] = ()  # DOCKER_HOST-style URLs; () = the local engine
    image_tag: str | None = None  # None = the offline-built gspo-sandbox:<recipe hash>
    container_memory_mb: int = 2048  # per warm container (tests get Limits.memory_mb each)
    tmpfs_mb: int = 256  # scratch size per sandbox
    urls: tuple[str, ...] = ()  # remote: `python -m sandbox serve` instances (or their LB)
    extra: dict[str, Any] = field(default_factory=dict)  # other backend options, passed through

    def backend_options(self) -> dict[str, Any]:
        if self.backend == "remote":  # the token comes from $GSPO_SANDBOX_TOKEN
            return {"urls": list(self.urls), **self.extra}
        if self.backend == "docker" or (self.backend == "auto" and self.docker_hosts):
            options: dict[str, Any] = {
                "memory_mb": self.container_memory_mb,
                "tmpfs_mb": self.tmpfs_mb,
            }
            if self.docker_hosts:
                options["hosts"] = list(self.docker_hosts)
            if self.image_tag:
                options["image_tag"] = self.image_tag
            return {**options, **self.extra}
        if self.backend in ("bubblewrap", "namespaces"):
            return {"tmpfs_mb": self.tmpfs_mb, **self.extra}
        return dict(self.extra)
