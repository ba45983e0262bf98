"""The sandbox as an HTTP service (`python -m sandbox serve`): SandboxFusion's /run_code and /judge."""
