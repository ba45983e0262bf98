"""Host-side file transfer of a session workspace: upload of a directory (as a tar the agent
unpacks inside the sandbox), download, and write_file's size check. Shared by local sessions
(pool.py) and sessions on a sandbox service (sandbox/service/remote_session.py)."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path

from sandbox.sessions.api import SessionLimits

__all__ = ["WorkspaceFiles", "file_payload"]


class WorkspaceFiles:
    """download / upload on top of a workspace's read_file / upload_tar (local and remote)."""

    limits: SessionLimits

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        raise NotImplementedError

    async def upload_tar(self, blob: bytes, dest: str = ".") -> int:
        raise NotImplementedError

    async def download(self, path: str, local_path: str | Path | None = None) -> bytes:
        data = await self.read_file(path)
        if local_path is not None:
            Path(local_path).write_bytes(data)
        return data

    async def upload(self, local_dir: str | Path, dest: str = ".") -> int:
        root = Path(local_dir)
        if not root.is_dir():
            raise NotADirectoryError(f"upload: {root} is not a local directory")
        blob = await asyncio.to_thread(_tar_tree, root, self.limits.disk_mb << 20)
        return await self.upload_tar(blob, dest)


def file_payload(path: str, data: str | bytes, limits: SessionLimits) -> bytes:
    """write_file's bytes, refused (ValueError) past SessionLimits.max_file_bytes."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > limits.max_file_bytes:
        raise ValueError(
            f"write_file({path!r}): {len(raw)} bytes exceeds "
            f"SessionLimits.max_file_bytes={limits.max_file_bytes}"
        )
    return raw


def _tar_tree(root: Path, max_bytes: int) -> bytes:
    """Regular files and directories under root (symlinks and specials are skipped)."""
    buf = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if path.is_symlink() or not path.is_file():
                    continue
                total += path.stat().st_size
                if total > max_bytes:
                    raise ValueError(
                        f"upload: {root} holds more than the session's disk quota "
                        f"({max_bytes >> 20} MiB, SessionLimits.disk_mb)"
                    )
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buf.getvalue()
