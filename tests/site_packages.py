"""Copy the installed packages that some imports load into a directory, for a sandbox session
whose image lacks them (its python3 is this one's minor version: compiled extensions load).
Used by tests/envs/test_mcp_tools.py (the mcp SDK) and tests/test_agent_sandbox.py (openai)."""

from __future__ import annotations

import importlib.metadata as md
import json
import shutil
import site
import subprocess
import sys
from pathlib import Path


def copy_imported_packages(imports: str, dest: Path) -> Path:
    """Every top-level package (and its dist-info) of site-packages that `imports` (Python
    source, e.g. "import openai"; run it far enough to load what is imported lazily) loads,
    copied under `dest`; returns `dest`."""
    code = (
        f"{imports}\nimport sys, json\n"
        "print(json.dumps(sorted({getattr(m, '__file__', None) or '' "
        "for m in list(sys.modules.values())})))"
    )
    files = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    root = site.getsitepackages()[0]
    tops = {f[len(root) + 1 :].split("/")[0] for f in files if f.startswith(root + "/")}
    tops = {t for t in tops if not t.startswith(("__editable__", "_distutils_hack"))}
    names = md.packages_distributions()
    dists = {d for t in tops for d in names.get(t.removesuffix(".py").split(".")[0], [])}
    tops |= {md.distribution(d)._path.name for d in dists}  # type: ignore[attr-defined]
    for top in sorted(tops):
        src = Path(root, top)
        if src.is_dir():
            shutil.copytree(src, dest / top, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest / top)
    return dest
