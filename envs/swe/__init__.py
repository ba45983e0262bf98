"""SWE-style repository tasks (gspo/SWE-v0): instances in the public datasets' layouts, graded
the way SWE-bench defines "resolved", on a path nothing the agent does can crash or forge.

instances.py  the JSONL loader (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym layouts; repo_path)
repo.py       host-side trees, patches, the pytest bundle copied into sandboxes
grading.py    graded tree + fresh-session test run + the runner's records (pytest_runner.py,
              whose audit hook scores tampering 0)
validate.py   gold validation (`python -m envs.swe validate PATH`)
attacks.py    the red-team suite (`python -m envs.swe agents PATH --attacks`); its payloads are
              attacks_frames.py (interpreter, frames, tracing) and attacks_results.py (tests, output)
env.py        the tool-using env (bash, view/create/str_replace/insert/undo_edit, submit)
"""
