#!/usr/bin/env bash
# The extended leg: the engine modules marked `extended` (tests/conftest.py), which CI's time budget (a warm run within
# 30 minutes) leaves out of README's test command: renames of every component, node pools' rollouts, an API server
# restart mid-up, post-deploy validation's failures, and the docker/containerd activation on simulated nodes. Each
# feature they cover keeps tests in README's command (mocks, real servers, real nodes); this leg drives the rest of
# their cases through the real engine. Run it before resolving an issue that touches them; its result is recorded in
# docs/development.md. Extra arguments go to pytest; GCU_TEST_WORKERS as in scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/test-prelude.sh
. "$ROOT/scripts/lib/test-prelude.sh"
started=$(date +%s)
rc=0
GCU_TEST_EXTENDED=1 .venv/bin/python -m pytest tests -m extended ${PARALLEL[@]+"${PARALLEL[@]}"} --durations=10 "$@" || rc=$?
echo "==> the extended leg took $(( $(date +%s) - started ))s, exit $rc" >&2
exit "$rc"
