"""The example submissions of a Kattis / ICPC / DOMjudge package: which folder expects what.

Folders (problem package format "Example submissions", legacy and 2023-07+, and DOMjudge's
problem archive): accepted, wrong_answer, time_limit_exceeded, run_time_error, rejected (any
non-accepted verdict), brute_force (never a wrong answer, but too slow or crashing),
memory_limit_exceeded, output_limit_exceeded / output_limit, compiler_error, no_output, and
mixed/, whose files state their verdicts with DOMjudge's `@EXPECTED_RESULTS@: WRONG-ANSWER,
TIMELIMIT` (any folder may carry that annotation; it then decides). A mixed/ file without one
is judged and listed with "any" expected. partially_accepted (scoring problems) and unknown
folders are listed as skipped with the reason.

Languages (the spec's language table): Python 3 `.py` and `.py3` (a `.py` whose shebang names
python2 is Python 2), C++ `.cc .cpp .cxx .c++ .C`. Python 2 and other languages are listed as
skipped, naming the language; a directory (multi-file submission) likewise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sandbox.types import Program, Verdict

_FAILING = (Verdict.WA, Verdict.TLE, Verdict.RE, Verdict.MLE, Verdict.OLE, Verdict.CE)
EXPECTED_VERDICTS: dict[str, tuple[Verdict, ...]] = {
    "accepted": (Verdict.OK,),
    "wrong_answer": (Verdict.WA,),
    "no_output": (Verdict.WA,),  # DOMjudge: the program printed nothing
    "time_limit_exceeded": (Verdict.TLE,),
    "run_time_error": (Verdict.RE, Verdict.MLE),
    "memory_limit_exceeded": (Verdict.MLE, Verdict.RE),
    "output_limit_exceeded": (Verdict.OLE,),
    "output_limit": (Verdict.OLE,),  # DOMjudge's name
    "compiler_error": (Verdict.CE,),
    "rejected": _FAILING,
    "brute_force": (Verdict.TLE, Verdict.RE, Verdict.MLE),
    "mixed": (Verdict.OK, *_FAILING),  # narrowed by @EXPECTED_RESULTS@
}
SKIPPED_FOLDERS = {"partially_accepted": "a scoring problem's folder (pass-fail judging only)"}
LANGUAGES = {".py": "python", ".py3": "python", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp"}
LANGUAGES |= {".c++": "cpp", ".C": "cpp"}
DOMJUDGE_RESULTS = {
    "CORRECT": (Verdict.OK,),
    "ACCEPTED": (Verdict.OK,),
    "WRONG-ANSWER": (Verdict.WA,),
    "NO-OUTPUT": (Verdict.WA,),
    "TIMELIMIT": (Verdict.TLE,),
    "TIME-LIMIT": (Verdict.TLE,),
    "RUN-ERROR": (Verdict.RE, Verdict.MLE),
    "MEMORY-LIMIT": (Verdict.MLE, Verdict.RE),
    "OUTPUT-LIMIT": (Verdict.OLE,),
    "COMPILER-ERROR": (Verdict.CE,),
}
_ANNOTATION = re.compile(r"@EXPECTED_RESULTS@\s*:?\s*([A-Za-z_,\s-]+)")


@dataclass(frozen=True, slots=True)
class Submission:
    path: Path
    category: str  # the submissions/ subdirectory: accepted, wrong_answer, mixed, ...
    program: Program | None  # None: not run here (skip_reason says why)
    skip_reason: str = ""
    expected: tuple[Verdict, ...] = ()


def read_submissions(root: Path) -> tuple[Submission, ...]:
    folder = root / "submissions"
    if not folder.is_dir():
        return ()
    found = []
    for category in sorted(d for d in folder.iterdir() if d.is_dir()):
        for path in sorted(category.iterdir()):
            found.append(_submission(path, category.name))
    return tuple(found)


def _submission(path: Path, category: str) -> Submission:
    if category not in EXPECTED_VERDICTS:
        why = SKIPPED_FOLDERS.get(category, f"unknown folder {category}/")
        return Submission(path, category, None, f"skipped: {why}")
    if path.is_dir():
        return Submission(path, category, None, "skipped: a multi-file submission")
    language = LANGUAGES.get(path.suffix) or LANGUAGES.get(path.suffix.lower())
    if path.suffix == ".C":
        language = "cpp"
    if language is None:
        return Submission(path, category, None, f"skipped: language {path.suffix or path.name!r}")
    source = path.read_text(errors="replace")
    if path.suffix == ".py" and re.match(r"#!.*python2", source):
        return Submission(path, category, None, "skipped: Python 2 (shebang)")
    expected = annotated_results(source) or EXPECTED_VERDICTS[category]
    program = Program(language, source)  # type: ignore[arg-type]
    return Submission(path, category, program, expected=expected)


def annotated_results(source: str) -> tuple[Verdict, ...]:
    """DOMjudge's `@EXPECTED_RESULTS@: A, B` as verdicts; () when there is none."""
    match = _ANNOTATION.search(source)
    if not match:
        return ()
    verdicts: list[Verdict] = []
    for name in re.split(r"[,\s]+", match.group(1).strip()):
        for verdict in DOMJUDGE_RESULTS.get(name.upper().replace("_", "-"), ()):
            if verdict not in verdicts:
                verdicts.append(verdict)
    return tuple(verdicts)
