#!/usr/bin/env bash
# The timing-sensitive tests (marker `timing`: they wait on work in other processes) on a
# loaded machine: CPU-burning processes run beside them (4 by default), as on a busy laptop or
# a shared CI box. A wait that does not scale with the machine (tests/timing.py) fails here
# first. `.ci/run` runs them with one burner beside the SWE gates, which load both cores.
#   bash .ci/loaded_tests.sh [pytest args...]     (BURNERS=N to change the number of burners)
set -euo pipefail
cd "$(dirname "$0")/.."
burners=()
stop_burners() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_burners EXIT
for _ in $(seq "${BURNERS:-4}"); do
  python -c "while True: pass" &
  burners+=("$!")
done
echo "loaded_tests: ${#burners[@]} CPU burners (pids ${burners[*]}); load $(cut -d' ' -f1 /proc/loadavg)" >&2
start=$(date +%s)
status=0
python -m pytest -q -m timing "$@" || status=$?
echo "loaded_tests: pytest -m timing took $(( $(date +%s) - start )) s beside ${#burners[@]} burners (exit $status)" >&2
exit "$status"
