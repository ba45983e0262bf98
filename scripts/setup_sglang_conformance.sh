#!/usr/bin/env bash
# Install SGLang's request classes (pinned, no GPU stack) for tests/test_sglang_conformance.py
# into a directory of their own, which only that test's validating subprocess puts on its path:
#   ${GSPO_SGLANG_CONFORMANCE_DIR:-~/.cache/gspo-agents/sglang-conformance}
# About 1.2 GB (triton is most of it). Re-installs only when scripts/sglang_conformance.txt
# changes. scripts/setup.sh runs this under CI=true or with --sglang-conformance.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
REQS=scripts/sglang_conformance.txt
DIR=${GSPO_SGLANG_CONFORMANCE_DIR:-$HOME/.cache/gspo-agents/sglang-conformance}
STAMP="$DIR/.installed-$(sha256sum "$REQS" | cut -c1-16)"
if [[ -f "$STAMP" ]]; then
  echo "sglang conformance packages already in $DIR"
  exit 0
fi
rm -rf "$DIR"
mkdir -p "$DIR"
# --no-deps: sglang's own requirements would replace torch with a CUDA build.
"$PY" -m pip install -q --no-deps --target "$DIR" -r "$REQS"
touch "$STAMP"
echo "sglang conformance packages installed in $DIR"
