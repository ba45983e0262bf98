"""Isolation: where untrusted code runs and what holds it in.

The backends (`backends/`: docker, bubblewrap, namespaces, and the explicit unsafe-local), the
in-sandbox runner (`runner.py`, `runner_proc.py`, `runner_guard.py`: one test's process, seccomp,
rlimits, whole-tree accounting), the per-slot cgroups (`cgroups.py`) and the sandbox image
(`image.py`, `Dockerfile`). Nothing here knows about verdicts or expected outputs: that is
`sandbox.judging`.
"""
