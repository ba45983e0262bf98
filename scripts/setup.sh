#!/usr/bin/env bash
# Set up gspo-agents on a fresh machine: Python packages (CPU PyTorch unless one is installed),
# the project in editable mode with its test extras (and, under CI=true or with
# --sglang-conformance, SGLang's request classes for the conformance test). Sandbox tooling
# (Docker engine, bubblewrap, the sandbox image) is set up by `bash .ci/setup_sandbox.sh` when
# run as root on Debian/Ubuntu.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  # Pin a CPU build: an unpinned `torch` pulls a multi-GB CUDA build.
  "$PY" -m pip install -q "torch==2.13.0" 2>/dev/null \
    || "$PY" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
fi
"$PY" -m pip install -q -e ".[dev]"
# SGLang's request classes for the conformance test, outside this environment (see the script).
if [[ "${CI:-}" == "true" ]] || [[ " $* " == *" --sglang-conformance "* ]]; then
  PYTHON="$PY" bash scripts/setup_sglang_conformance.sh
fi
if [[ "${1:-}" != "--no-sandbox" ]] && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null \
   && [[ -f .ci/setup_sandbox.sh ]]; then
  bash .ci/setup_sandbox.sh
fi
echo "setup done: try 'python -m gspo_agents.train' (CPU, tiny model) or 'python -m pytest -q'"
