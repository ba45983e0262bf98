"""SWE instances that run in their own image: the repository is at /testbed inside the session.

The host holds no copy of the repository, so what repo.py and grading.py do on a host tree is
done here through the session's file calls, with the same rules:

- `patch_in_session`: a patch applied on the host to the session's copies of the files it
  touches (read, `git apply`, written back); used for bug_patch, test_patch and the gold patch,
  only in sessions where no agent or tested code has run.
- `manifest`: at episode start, in the fresh session, the sha256 of the repository's own non-test
  source files (repo.is_test_path false) after bug_patch: the trusted list of files the grader
  may take from the agent.
- `agent_edits`: after the agent's processes are killed, the files of that list whose digest
  changed, read from the agent's workspace (None: deleted, unreadable or not a regular file).
  The digests are computed by the session agent itself (no command runs in the workspace);
  anything the agent added is never taken.
- `ImageTree`: what the grader's fresh session on the same image is given: patches to apply
  before the edits (bug_patch), the edits, patches after them (test_patch).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from envs.swe.repo import _SKIP_DIRS, PatchError, apply_patch, is_test_path

__all__ = ["ImageTree", "agent_edits", "manifest", "patch_in_session"]

TESTBED = "/testbed"
SOURCE_MAX_BYTES = 4 << 20
_DIFF_PATH = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|--- a/(\S+)|\+\+\+ b/(\S+))", re.M)


@dataclass(frozen=True)
class ImageTree:
    """The graded tree of an image instance, built in the grader's session from the image."""

    image: str
    before: tuple[tuple[str, str], ...] = ()  # (what, patch) applied first (bug_patch)
    edits: dict[str, bytes | None] = field(default_factory=dict)  # the agent's (None: deleted)
    after: tuple[tuple[str, str], ...] = ()  # (what, patch) applied last (test_patch, gold)


def patch_paths(patch: str) -> list[str]:
    found = []
    for groups in _DIFF_PATH.findall(patch):
        found += [g for g in groups if g and g != "/dev/null"]
    return sorted(set(found))


async def patch_in_session(ws: Any, patch: str, *, what: str, root: str = TESTBED) -> None:
    """Apply `patch` to the session's tree under root (PatchError when it does not apply)."""
    if not patch.strip():
        return
    paths = patch_paths(patch)
    with tempfile.TemporaryDirectory(prefix="swe-patch-") as tmp:
        for rel in paths:
            try:
                data = await ws.read_file(f"{root}/{rel}")
            except FileNotFoundError:
                continue
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_bytes(data)
        apply_patch(Path(tmp), patch, what=what)
        gone = []
        for rel in paths:
            local = Path(tmp) / rel
            if local.is_file():
                await ws.write_file(f"{root}/{rel}", local.read_bytes())
            else:
                gone.append(f"{root}/{rel}")
        if gone:
            await _remove(ws, gone)


async def _remove(ws: Any, paths: list[str]) -> None:
    import shlex

    await ws.exec("rm -f -- " + " ".join(shlex.quote(p) for p in paths), fresh=True)


async def manifest(ws: Any, root: str = TESTBED) -> dict[str, str]:
    """{relative path: sha256} of the repository's own non-test source files (trusted only in
    a session where nothing untrusted has run yet)."""
    found = await ws.digests(  # a file over the limit is left out: never taken, never deleted
        root=root, suffix=".py", skip=tuple(_SKIP_DIRS), max_bytes=SOURCE_MAX_BYTES
    )
    return {
        rel: digest
        for rel, digest in found.items()
        if digest and not is_test_path(rel) and not set(PurePosixPath(rel).parts) & _SKIP_DIRS
    }


async def agent_edits(
    ws: Any, start: dict[str, str], root: str = TESTBED
) -> tuple[dict[str, bytes | None], list[str]]:
    """The agent's changed source files (call after kill_processes) and notes on those lost."""
    now = await ws.digests(paths=[f"{root}/{rel}" for rel in start], max_bytes=SOURCE_MAX_BYTES)
    edits: dict[str, bytes | None] = {}
    notes = []
    for rel, digest in start.items():
        if now.get(f"{root}/{rel}") == digest:
            continue
        try:
            edits[rel] = await ws.read_file(f"{root}/{rel}", max_bytes=SOURCE_MAX_BYTES)
        except (OSError, ValueError) as exc:  # deleted, chmod-ed, a FIFO or dir, too big
            edits[rel] = None
            notes.append(f"{rel}: {type(exc).__name__}")
    return edits, notes


async def build_in_session(ws: Any, tree: ImageTree, root: str = TESTBED) -> list[str]:
    """Turn the session's pristine /testbed into the graded tree; notes on what did not apply."""
    for what, patch in tree.before:
        await patch_in_session(ws, patch, what=what, root=root)
    gone = []
    for rel, data in sorted(tree.edits.items()):
        if data is None:
            gone.append(f"{root}/{rel}")
        else:
            await ws.write_file(f"{root}/{rel}", data)
    if gone:
        await _remove(ws, gone)
    notes = []
    for what, patch in tree.after:
        try:
            await patch_in_session(ws, patch, what=what, root=root)
        except PatchError as exc:  # only possible when the agent's edits collide with it
            notes.append(f"{what}: {exc}")
    return notes
