#!/usr/bin/env bash
# Issue 24's gates: every shipped SWE instance gold-validated in the sandbox (~5 min alone) ...
set -euo pipefail
cd "$(dirname "$0")/.."
python -m envs.swe validate envs/swe/data/instances.jsonl --backend bubblewrap --concurrency 2
# ... and the red-team suite through the tools (envs/swe/attacks.py): the oracle resolves all,
# and each instance gets 2 of the 62 attacks (null, stubs, deleted tests among them) by a seeded
# rotation, every attack on 4-5 instances; the seed is the day of the year, printed, so a run is
# reproducible and successive runs cover other pairs (432 episodes, ~13 min alone; --full plays
# all of them).
python -m envs.swe agents envs/swe/data/instances.jsonl --backend bubblewrap --concurrency 2 \
    --attacks --per-instance 2 --seed "$(date -u +%j)"
