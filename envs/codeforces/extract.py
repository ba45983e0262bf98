"""Pull the submitted program out of a model answer: the LAST fenced code block.

The language comes from the fence's info string (```python, ```cpp, ...). Everything that is the
model's fault (no block, no or unknown language, an oversized program, text that is not valid
UTF-8) becomes an `Extraction` with a verdict and a message, never an exception: it scores 0
like a wrong answer. The scan is line-based and linear, so a 1 MB answer costs milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.types import Language

# Fence info strings we accept, mapped to sandbox languages.
LANGUAGE_ALIASES: dict[str, Language] = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "py3": "python",
    "cpp": "cpp",
    "c++": "cpp",
    "cc": "cpp",
    "cxx": "cpp",
    "c++17": "cpp",
    "c++20": "cpp",
}
MAX_SOURCE_BYTES = 64 * 1024  # the Codeforces source-size limit

# Env-level verdicts (the sandbox's own are OK, WA, TLE, MLE, RE, CE, OLE).
NO_CODE = "NO_CODE"
UNKNOWN_LANGUAGE = "UNKNOWN_LANGUAGE"
SOURCE_TOO_LONG = "SOURCE_TOO_LONG"
INVALID_UTF8 = "INVALID_UTF8"


@dataclass(frozen=True, slots=True)
class Extraction:
    language: Language | None  # set when a program was found
    source: str | None
    verdict: str | None = None  # set when no program can be judged
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict is None


def _fail(verdict: str, message: str) -> Extraction:
    return Extraction(None, None, verdict, message)


def _blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block; an unclosed final block runs to the end."""
    blocks: list[tuple[str, str]] = []
    info: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if info is None:
            if stripped.startswith("```"):
                info, body = stripped[3:].strip(), []
        elif stripped == "```":
            blocks.append((info, "\n".join(body)))
            info = None
        else:
            body.append(line)
    if info is not None:
        blocks.append((info, "\n".join(body)))
    return blocks


def extract_code(answer: str | bytes) -> Extraction:
    if isinstance(answer, bytes):
        try:
            answer = answer.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _fail(
                INVALID_UTF8, f"the answer is not valid UTF-8 ({exc.reason} at byte {exc.start})"
            )
    if not answer.strip():
        return _fail(NO_CODE, "empty answer; reply with one ```python or ```cpp code block")
    blocks = _blocks(answer)
    if not blocks:
        return _fail(NO_CODE, "no fenced code block; reply with one ```python or ```cpp code block")
    info, source = blocks[-1]
    tag = info.split()[0].lower() if info else ""
    language = LANGUAGE_ALIASES.get(tag)
    if language is None:
        shown = repr(tag) if tag else "none"
        return _fail(UNKNOWN_LANGUAGE, f"code block language {shown}; use ```python or ```cpp")
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates, e.g. from a lossy decode upstream
        return _fail(INVALID_UTF8, "the code block holds characters that are not valid UTF-8")
    if not source.strip():
        return _fail(NO_CODE, "the last code block is empty")
    if size > MAX_SOURCE_BYTES:
        return _fail(SOURCE_TOO_LONG, f"program is {size} bytes; the limit is {MAX_SOURCE_BYTES}")
    return Extraction(language, source + "\n")
