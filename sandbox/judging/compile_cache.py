"""Compile cache: a C++ program (or checker) that was compiled once is never compiled again.

Key: sha256 of (language, the runner's source — which fixes the compiler flags —, the program's
source, the image the sandbox runs: Docker image tag or rootfs path). Value: the compiled binary,
or the compiler's message for a real compile error (the compiler ran and rejected the source;
a compiler that ran out of time or memory is not cached, since load can cause that).

How a hit works: the binary goes into the sandbox with the request and the runner runs it
instead of compiling (sandbox/isolation/runner.py); a cached compile error returns CE without entering the
sandbox at all. A miss asks the runner to send the binary back after compiling.

Scope: one in-memory LRU per process, bounded by `max_bytes`, shared by every Sandbox of the
process (the default); plus, across processes, a directory (default
~/.cache/gspo-agents/compile, mode 0700, bounded by `disk_max_bytes`, oldest entries pruned)
written atomically. GSPO_COMPILE_CACHE_DIR=off keeps it in memory only. The binary only ever
runs inside the sandbox again, so a cache entry cannot reach the host; what it could affect is
a verdict, which is why the key includes everything the compile depended on.
Python programs are not cached: their "compile" is a syntax check in a forked child.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.types import Program

log = logging.getLogger("sandbox")
RUNNER_DIGEST = hashlib.sha256(
    b"".join(
        (Path(__file__).resolve().parent.parent / "isolation" / name).read_bytes()
        for name in ("runner.py", "runner_proc.py")
    )
).hexdigest()
MAX_BINARY_BYTES = 16 << 20  # larger binaries are compiled each time, not cached
DEFAULT_DIR = Path.home() / ".cache" / "gspo-agents" / "compile"
_CE = b"CE\n"  # prefix of a cached compile error on disk


@dataclass(frozen=True, slots=True)
class Entry:
    binary: bytes | None  # None: a compile error
    message: str = ""  # the compiler's message for a compile error


class CompileCache:
    """Thread-safe LRU of compiled programs, optionally backed by a directory."""

    def __init__(
        self,
        max_bytes: int = 256 << 20,
        directory: str | Path | None = None,
        disk_max_bytes: int = 1 << 30,
    ) -> None:
        self.max_bytes, self.disk_max_bytes = max_bytes, disk_max_bytes
        self.directory = Path(directory) if directory is not None else None
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(program: Program, image: str) -> str:
        digest = hashlib.sha256()
        for part in (program.language, RUNNER_DIGEST, image, program.source):
            digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
        return digest.hexdigest()

    def get(self, key: str) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None:
            entry = self._read_disk(key)
            if entry is not None:
                self._remember(key, entry)
        with self._lock:
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
        return entry

    def put(self, key: str, entry: Entry) -> None:
        self._remember(key, entry)
        self._write_disk(key, entry)

    def _remember(self, key: str, entry: Entry) -> None:
        size = _size(entry)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes -= _size(old) if old else 0
            self._entries[key] = entry
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= _size(evicted)

    # ---- the directory layer ------------------------------------------------------------------
    def _read_disk(self, key: str) -> Entry | None:
        if self.directory is None:
            return None
        try:
            data = (self.directory / key).read_bytes()
        except OSError:
            return None
        if data.startswith(_CE):
            return Entry(None, data[len(_CE) :].decode("utf-8", "replace"))
        return Entry(data)

    def _write_disk(self, key: str, entry: Entry) -> None:
        if self.directory is None:
            return
        data = entry.binary if entry.binary is not None else _CE + entry.message.encode()
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.directory / key)  # atomic: readers see all or nothing
            self._prune_disk()
        except OSError as exc:  # a full or read-only disk costs speed, not correctness
            log.warning("compile cache: cannot write %s: %s", self.directory, exc)

    def _prune_disk(self) -> None:
        assert self.directory is not None
        files = [(p.stat().st_mtime, p.stat().st_size, p) for p in self.directory.iterdir()]
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.disk_max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def _size(entry: Entry | None) -> int:
    if entry is None:
        return 0
    return len(entry.binary) if entry.binary is not None else len(entry.message)


_shared: CompileCache | None = None
_shared_lock = threading.Lock()


def shared_cache() -> CompileCache:
    """The process-wide cache every Sandbox uses unless given its own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            setting = os.environ.get("GSPO_COMPILE_CACHE_DIR", "")
            directory = None if setting == "off" else Path(setting or DEFAULT_DIR)
            _shared = CompileCache(directory=directory)
        return _shared


def image_identity(backend: Any) -> str:
    """What the compiler ran on: the Docker image, the rootfs, or the host (unsafe-local)."""
    return f"{backend.name}:{getattr(backend, 'image', None) or getattr(backend, 'rootfs', '')}"


# ---- the hooks sandbox.core calls around one runner request ------------------------------------
def prepare(
    cache: CompileCache | None, program: Program, image: str, request: dict[str, Any]
) -> Entry | None:
    """On a hit put the binary into the request (or return the cached compile error); on a miss
    ask the runner for the binary. Returns the cached compile error entry, else None."""
    if cache is None or program.language != "cpp":
        return None
    entry = cache.get(CompileCache.key(program, image))
    if entry is None:
        request["return_binary"] = MAX_BINARY_BYTES
        return None
    if entry.binary is None:
        return entry
    request["binary"] = base64.b64encode(entry.binary).decode("ascii")
    return None


def remember(
    cache: CompileCache | None, program: Program, image: str, request: dict[str, Any], out: Any
) -> None:
    """After a miss: store the binary the runner sent back, or a real compile error."""
    if cache is None or not request.get("return_binary"):
        return
    key = CompileCache.key(program, image)
    if out.compile_ok and getattr(out, "binary", None):
        binary = base64.b64decode(out.binary)
        if len(binary) <= MAX_BINARY_BYTES:
            cache.put(key, Entry(binary))
    elif (
        not out.compile_ok
        and out.finished
        and out.compile_output.strip()  # a compiler killed by a signal says nothing: not cached
        and not out.compile_output.startswith("compiler:")  # out of time/memory: load-dependent
    ):
        cache.put(key, Entry(None, out.compile_output))
