"""Answer extraction from `\\boxed{...}` (nested braces), robust to hostile model output.

Pure string code, no math-verify: the arithmetic env uses it on its own, and Math-v0 extracts
here before anything is sent to the verifier processes.
"""

from __future__ import annotations

import asyncio
import re

# `\boxed{`, `\boxed {`, `\fbox{`; `\boxed 5` (space form) is handled separately.
_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_SPACE_FORM = re.compile(r"\\boxed\s+([^\s{}$\\]+)")
# Trying a handful of the last occurrences bounds the work on adversarial input (1 MB of
# unbalanced "\boxed{") to a few linear scans.
_MAX_CANDIDATES = 4


def clean_text(text: object) -> str:
    """Any model output as a valid UTF-8 str: lone surrogates and non-str become replacements."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    return text.encode("utf-8", "replace").decode("utf-8")


# Above this size extraction (tens of ms on adversarial megabytes) moves off the event loop.
_INLINE_LIMIT = 1 << 16


async def aextract_answer(action: object) -> str | None:
    """`extract_boxed(clean_text(action))` without stalling the event loop on huge outputs."""
    if isinstance(action, str) and len(action) <= _INLINE_LIMIT:
        return extract_boxed(clean_text(action))
    return await asyncio.to_thread(lambda: extract_boxed(clean_text(action)))


def extract_boxed(text: str) -> str | None:
    """The content of the LAST well-formed `\\boxed{...}` in `text`, stripped; None if none."""
    starts = [m.end() for m in _OPEN.finditer(text)]
    for start in reversed(starts[-_MAX_CANDIDATES:]):
        content = _balanced(text, start)
        if content is not None:
            return content.strip()
    spaced = _SPACE_FORM.findall(text)
    return spaced[-1] if spaced else None


_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)


def _balanced(text: str, start: int) -> str | None:
    """text[start:] up to the brace closing an already-open one; None when it never closes."""
    depth = 1
    for m in _BRACE_OR_ESCAPE.finditer(text, start):
        token = m.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return text[start : m.start()]
        # an escaped character such as `\{` or `\}` does not count
    return None
