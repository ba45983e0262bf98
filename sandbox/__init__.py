"""Sandboxed execution of untrusted generated code (placeholder; see sandbox helper)."""
