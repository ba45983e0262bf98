"""Our own problem-directory layout (envs/codeforces/problems.py) behind the loader interface."""

from __future__ import annotations

from pathlib import Path

from envs.codeforces.problems import Problem, load_problemset, load_split


def load_dir(path: str, split: str) -> list[Problem]:
    root = Path(path)
    return load_split(split, root) if (root / "splits.json").exists() else load_problemset(root)
