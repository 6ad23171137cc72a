#!/usr/bin/env bash
# The test command: set up (cached), build the whole toolchain (scripts/lib/test-prelude.sh), then every test — unit
# tests under Pulumi mocks, real kube-apiserver / dockerd tests, real image builds and the end-to-end engine tests.
# Extra arguments go to pytest (e.g. scripts/test.sh -k gcu_nodes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/test-prelude.sh
. "$ROOT/scripts/lib/test-prelude.sh"
started=$(date +%s.%N)
rc=0
# The slowest tests are listed, so a test that grows or hangs shows in every run's log.
.venv/bin/python -m pytest tests ${PARALLEL[@]+"${PARALLEL[@]}"} --durations=15 "$@" || rc=$?
secs="$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
if [ -n "${GCU_TIMINGS_FILE:-}" ]; then printf 'test.sh/pytest\t%s\texit %s\n' "$secs" "$rc" >> "$GCU_TIMINGS_FILE"; fi
echo "==> tests took ${secs}s" >&2
exit "$rc"
