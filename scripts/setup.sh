#!/usr/bin/env bash
# Set up gspo-agents on a fresh machine:
#   1. Python packages: CPU PyTorch unless one is installed, the project in editable mode with
#      its test extras and interop (verifiers, mcp), and (under CI=true or with
#      --sglang-conformance) SGLang's request classes for the conformance test;
#   2. the sandbox (Docker engine and daemon, bubblewrap, the sandbox image) via
#      .ci/setup_sandbox.sh, when run as root on Debian/Ubuntu.
# The sandbox is only needed by envs that run generated code (codeforces, mathtool). If it cannot
# be set up, this script says so and what will not work, and still exits 0: the default run
# (env=arithmetic) needs no sandbox, so `bash scripts/setup.sh && python -m gspo_agents.train`
# always reaches training.
#   --no-sandbox    skip step 2        --sandbox-only    skip step 1
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
FLAGS=" $* "

# pip without -q: on a fresh machine the installs take minutes (torch alone is ~200 MB), and its
# "Collecting ... / Downloading ..." lines are the progress display.
python_packages() {
  if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "setup: [1/3] CPU PyTorch (the largest download; minutes on a fresh machine)" >&2
    # Pin a CPU build: an unpinned `torch` pulls a multi-GB CUDA build.
    "$PY" -m pip install "torch==2.13.0" \
      || "$PY" -m pip install torch --index-url https://download.pytorch.org/whl/cpu
  fi
  echo "setup: [2/3] gspo-agents and its test extras (pip install -e '.[dev,interop]')" >&2
  "$PY" -m pip install -e ".[dev,interop]"  # interop: verifiers and mcp (env=verifiers, MCP tools)
  # SGLang's request classes for the conformance test, outside this environment (see the script).
  if [[ "${CI:-}" == "true" ]] || [[ "$FLAGS" == *" --sglang-conformance "* ]]; then
    PYTHON="$PY" bash scripts/setup_sglang_conformance.sh
  fi
}

sandbox_not_set_up() {  # $1: why
  cat >&2 <<MSG
setup: the sandbox is NOT set up: $1
setup: what works: the default run (env=arithmetic) and env=math, which run no code.
setup: what will not: env=codeforces and env=mathtool (they run generated code) and the sandbox
setup:   tests, unless a backend is available: a Docker daemon with the sandbox image,
setup:   bubblewrap (bwrap), or unshare with user namespaces.
setup: to fix: run 'bash .ci/setup_sandbox.sh' as root on Debian/Ubuntu (installs docker.io,
setup:   starts dockerd, builds the image), or install bubblewrap.
MSG
}

sandbox() {
  if [[ $(id -u) != 0 ]]; then
    sandbox_not_set_up "not running as root (apt-get and dockerd need root)"
  elif ! command -v apt-get >/dev/null 2>&1; then
    sandbox_not_set_up "no apt-get (the sandbox setup supports Debian/Ubuntu)"
  elif ! bash .ci/setup_sandbox.sh; then
    sandbox_not_set_up ".ci/setup_sandbox.sh failed (its message is above)"
  fi
}

[[ "$FLAGS" == *" --sandbox-only "* ]] || python_packages
if [[ "$FLAGS" != *" --no-sandbox "* ]]; then
  echo "setup: [3/3] the sandbox (Docker, bubblewrap, the offline-built image; minutes the first time)" >&2
  sandbox
fi
echo "setup done: try 'python -m gspo_agents.train' (CPU, tiny model) or 'python -m pytest -q -m \"not slow\"' (the fast tests)"
