"""Judging: turning a program's runs into verdicts.

Output comparison (`judge.py`), compiled-binary cache (`compile_cache.py`), function-style tests
and their unforgeable harness (`functional.py`, `fnharness.py`), Kattis/ICPC problem packages
(`kattis.py`) and checking a problem set's own submissions (`verify.py`). Programs run through
`sandbox.core.Sandbox`, which uses the isolation backends.
"""
