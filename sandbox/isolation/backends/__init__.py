"""Per-run backends: each starts the in-sandbox runner somewhere isolated (see base.py)."""
