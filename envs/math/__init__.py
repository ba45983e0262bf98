"""Math environments: Math-v0 (single turn, math-verify in a process pool) and their data.

Importing this package is cheap; math-verify is imported only inside the verifier processes.
"""
