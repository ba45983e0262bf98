"""Build (or re-verify) the shipped problem set from the specs.

    python -m envs.codeforces.tools.build_problemset          # regenerate envs/data/codeforces
    python -m envs.codeforces.tools.build_problemset --verify # re-run refs on the committed tests

This is a DEVELOPMENT tool for trusted, hand-written reference solutions: it runs them as plain
local subprocesses, with no isolation. It is not a sandbox backend and is never used to judge
model output (the env always goes through `sandbox`). Generators are seeded per problem
(crc32 of the id), so a rebuild reproduces the committed files byte for byte.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

from envs.codeforces.problems import SHIPPED_DIR, Problem, load_problemset

from .spec import Spec
from .specs_easy import SPECS as EASY
from .specs_medium import SPECS as MEDIUM
from .specs_medium_arrays import ARRAYS
from .specs_medium_dp_graphs import DP_GRAPHS
from .specs_medium_numbers import NUMBERS
from .specs_medium_strings import STRINGS
from .specs_special import SPECS as SPECIAL

ALL_SPECS: list[Spec] = EASY + MEDIUM + SPECIAL
MIN_HIDDEN = 10
TEST_EVERY = 5  # every 5th problem of a tier (sorted by id) goes to the test split


def seed_of(pid: str) -> int:
    return zlib.crc32(pid.encode())


def _run(cmd: list[str], stdin: str, timeout: float = 20.0) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr[-500:]}")
    return proc.stdout


def _compile_cpp(source: str, workdir: Path) -> Path:
    src, exe = workdir / "ref.cpp", workdir / "ref"
    src.write_text(source)
    subprocess.run(
        ["g++", "-O2", "-std=c++17", "-o", str(exe), str(src)], check=True, capture_output=True
    )
    return exe


def _accepts(mode: str, checker: str | None, inp: str, out: str, ans: str, workdir: Path) -> bool:
    if mode == "tokens":
        return out.split() == ans.split()
    if mode == "float":
        a, b = out.split(), ans.split()
        return len(a) == len(b) and all(
            x == y or math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-6)
            for x, y in zip(a, b)
        )
    files = []
    for name, text in (("in.txt", inp), ("out.txt", out), ("ans.txt", ans)):
        (workdir / name).write_text(text)
        files.append(str(workdir / name))
    (workdir / "checker.py").write_text(checker or "")
    return subprocess.run([sys.executable, str(workdir / "checker.py"), *files]).returncode == 0


def _inputs(spec: Spec) -> tuple[list[str], list[str]]:
    rng = random.Random(seed_of(spec.id))
    hidden, seen = [], set(spec.samples)
    gen = spec.gen  # a spec without a generator has only its edge cases
    candidates = list(spec.edge)
    if gen is not None:
        candidates += [gen(rng) for _ in range(spec.n_generated)]
    attempts = 0
    while True:
        for c in candidates:
            if c not in seen:
                seen.add(c)
                hidden.append(c)
        if len(hidden) >= MIN_HIDDEN or attempts > 200 or gen is None:
            break
        attempts += 1
        candidates = [gen(rng)]
    if len(hidden) < MIN_HIDDEN:
        raise RuntimeError(f"{spec.id}: only {len(hidden)} distinct hidden tests")
    return list(spec.samples), hidden


def build_one(spec: Spec, root: Path) -> int:
    samples, hidden = _inputs(spec)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "ref.py").write_text(spec.py)
        exe = _compile_cpp(spec.cpp, work)
        rows = []
        for inp, is_sample in [(s, True) for s in samples] + [(h, False) for h in hidden]:
            expected = _run([sys.executable, str(work / "ref.py")], inp)
            got_cpp = _run([str(exe)], inp)
            if not _accepts(spec.judge["mode"], spec.checker, inp, got_cpp, expected, work):
                raise RuntimeError(f"{spec.id}: C++ reference disagrees on input {inp[:80]!r}")
            rows.append({"input": inp, "output": expected, "sample": is_sample})
    out = root / spec.id
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    judge = dict(spec.judge)
    if spec.checker:
        judge["checker_file"] = "checker.py"
        (out / "checker.py").write_text(spec.checker)
    meta = {
        "id": spec.id,
        "title": spec.title,
        "tier": spec.tier,
        "time_limit_s": spec.time_limit_s,
        "memory_mb": spec.memory_mb,
        "judge": judge,
        "tags": spec.tags,
        "tests_origin": {
            "spec": _spec_file(spec),
            "generator_seed": seed_of(spec.id),
            "n_generated": spec.n_generated,
            "edge_cases": len(spec.edge),
        },
    }
    (out / "problem.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "statement.md").write_text(f"# {spec.title}\n\n{spec.statement()}")
    (out / "ref.py").write_text(spec.py)
    (out / "ref.cpp").write_text(spec.cpp)
    (out / "tests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def _spec_file(spec: Spec) -> str:
    for name, group in (
        ("specs_easy.py", EASY),
        ("specs_medium_numbers.py", NUMBERS),
        ("specs_medium_strings.py", STRINGS),
        ("specs_medium_arrays.py", ARRAYS),
        ("specs_medium_dp_graphs.py", DP_GRAPHS),
        ("specs_special.py", SPECIAL),
    ):
        if any(s is spec for s in group):
            return f"envs/codeforces/tools/{name}"
    return "?"


def normalize_python(root: Path) -> None:
    """ruff-format the shipped .py files so the repository's lint/format check passes on them."""
    ruff = shutil.which("ruff")
    if ruff is None:
        raise SystemExit(
            "ruff is needed to normalise the shipped ref.py/checker.py files: pip install ruff"
        )
    subprocess.run([ruff, "check", "--fix", "-q", str(root)], check=False)
    subprocess.run([ruff, "format", "-q", str(root)], check=True)


def write_splits(root: Path) -> dict[str, list[str]]:
    splits: dict[str, list[str]] = {"train": [], "test": []}
    for tier in sorted({s.tier for s in ALL_SPECS}):
        ids = sorted(s.id for s in ALL_SPECS if s.tier == tier)
        for i, pid in enumerate(ids):
            splits["test" if i % TEST_EVERY == TEST_EVERY // 2 else "train"].append(pid)
    (root / "splits.json").write_text(json.dumps(splits, indent=2) + "\n")
    return splits


def verify(root: Path) -> tuple[int, int]:
    """Re-run both references of every committed problem locally; return (problems, tests)."""
    problems: list[Problem] = load_problemset(root)
    n_tests = 0
    for p in problems:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "ref.py").write_text(p.reference["python"])
            exe = _compile_cpp(p.reference["cpp"], work)
            for t in p.all_tests:
                for cmd in ([sys.executable, str(work / "ref.py")], [str(exe)]):
                    got = _run(cmd, t.input)
                    if not _accepts(
                        p.judge.mode, p.judge.checker_source, t.input, got, t.output, work
                    ):
                        raise RuntimeError(f"{p.id}: {cmd[-1]} fails on input {t.input[:80]!r}")
                n_tests += 1
    return len(problems), n_tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verify", action="store_true", help="re-run refs on the committed tests")
    parser.add_argument("--only", nargs="*", help="build only these problem ids")
    parser.add_argument("--root", type=Path, default=SHIPPED_DIR)
    args = parser.parse_args()
    if args.verify:
        n_problems, n_tests = verify(args.root)
        print(
            f"verified {n_problems} problems, {n_tests} tests, {2 * n_problems} reference solutions"
        )
        return
    ids = [s.id for s in ALL_SPECS]
    if len(ids) != len(set(ids)):
        raise SystemExit(f"duplicate problem ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    args.root.mkdir(parents=True, exist_ok=True)
    total = 0
    for spec in ALL_SPECS:
        if args.only and spec.id not in args.only:
            continue
        n = build_one(spec, args.root)
        total += n
        print(f"{spec.id}: {n} tests")
    splits = write_splits(args.root)
    normalize_python(args.root)
    print(f"built {total} tests; train={len(splits['train'])} test={len(splits['test'])}")


if __name__ == "__main__":
    main()
