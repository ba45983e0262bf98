"""open-r1/codeforces rows behind the loader interface (the mapping is envs/codeforces/openr1.py)."""

from __future__ import annotations

from envs.codeforces.openr1 import load_openr1 as _load
from envs.codeforces.problems import Problem


def load_openr1(
    path: str, split: str, *, skip_unsupported: bool = False, split_mode: str = "hash"
) -> list[Problem]:
    return _load(path, split, skip_unsupported=skip_unsupported, split_mode=split_mode)
