"""Pure text helpers of SWE-v0's editor tools: numbered views and a patch as str_replace edits."""

from __future__ import annotations

from envs.tools import ToolError

__all__ = ["gold_edits", "numbered", "view_range_text"]


def numbered(text: str, first: int) -> str:
    """`text` with right-aligned line numbers starting at `first` (as `cat -n` shows them)."""
    return "".join(f"{n:6}\t{line}\n" for n, line in enumerate(text.splitlines(), first))


def view_range_text(text: str, view_range: list[int]) -> str:
    lines = text.splitlines()
    if len(view_range) != 2:
        raise ToolError(f"view_range must be [start, end], got {view_range}")
    start, end = view_range
    end = len(lines) if end == -1 else end
    if not 1 <= start <= max(len(lines), 1) or end < start:
        raise ToolError(f"view_range {view_range} is outside the file's 1..{len(lines)} lines")
    return numbered("\n".join(lines[start - 1 : end]), start)


def gold_edits(patch: str) -> list[tuple[str, str, str]]:
    """A unified diff as (path, old text, new text) per hunk: context plus removed lines, and
    context plus added lines. Only modifications of existing files are supported."""
    edits: list[tuple[str, str, str]] = []
    path = ""
    old: list[str] = []
    new: list[str] = []
    in_hunk = False

    def flush() -> None:
        if in_hunk and path:
            edits.append((path, "".join(old), "".join(new)))

    for line in patch.splitlines(keepends=True):
        if line.startswith("+++ "):
            flush()
            in_hunk, old, new = False, [], []
            target = line[4:].strip()
            path = target[2:] if target.startswith(("a/", "b/")) else target
        elif line.startswith("@@"):
            flush()
            in_hunk, old, new = True, [], []
        elif in_hunk and line.startswith(("-", "+", " ")) and not line.startswith("--- "):
            body = line[1:]
            if line[0] in " -":
                old.append(body)
            if line[0] in " +":
                new.append(body)
        elif line.startswith("\\"):
            continue
        elif line.startswith(("diff ", "--- ", "index ")):
            flush()
            in_hunk = False
    flush()
    return edits
