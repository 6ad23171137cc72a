#!/usr/bin/env bash
# The test command: set up (cached), build the whole toolchain (the tests need both the local control plane and the
# Pulumi toolchain built from Go modules), then every test — unit tests under Pulumi mocks, real kube-apiserver /
# dockerd tests, real image builds and the end-to-end engine tests.
# Extra arguments go to pytest (e.g. scripts/test.sh -k gcu_nodes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
eval "$("$ROOT/scripts/toolchain.sh" all)"
cd "$ROOT"
# What killed earlier runs left on this machine (a session's real nodes, etcd data in /dev/shm, dockerd mounts) goes
# first: nothing of this run is starting yet, so nothing is spared for its age (devtools/sweep.py).
.venv/bin/python -m devtools.sweep --min-age 0
started=$(date +%s.%N)
rc=0
# Test modules run side by side, each whole on one worker (most engine modules share one stack across their
# tests, in order): GCU_TEST_WORKERS, default 4; 0 runs them in this process. Most of an engine test's time is
# spent waiting for servers, so four workers pay off even on two CPUs. (Not --dist loadgroup: with pytest 9.2
# it no longer groups, pytest-dev/pytest-xdist#1386.)
workers="${GCU_TEST_WORKERS:-4}"
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadfile)
# The slowest tests are listed, so a test that grows or hangs shows in every run's log.
.venv/bin/python -m pytest tests ${parallel[@]+"${parallel[@]}"} --durations=15 "$@" || rc=$?
secs="$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
if [ -n "${GCU_TIMINGS_FILE:-}" ]; then printf 'test.sh/pytest\t%s\texit %s\n' "$secs" "$rc" >> "$GCU_TIMINGS_FILE"; fi
echo "==> tests took ${secs}s" >&2
exit "$rc"
