#!/usr/bin/env bash
# The oldest-Kubernetes leg: the engine end-to-end tests on the oldest Kubernetes gcu-stack supports
# (components/kube_support.py OLDEST_SUPPORTED), its control plane and real nodes built from
# devtools/oldest-kubernetes (cached under ~/.cache/gcu-stack/kubernetes-<version>/ like the newest), the real
# nodes on Debian's containerd 1.6 (config version 2). README's test command runs everything on the newest; this leg
# runs outside it (CI's time budget) and its result is recorded in docs/development.md.
# Extra arguments go to pytest; GCU_TEST_WORKERS as in scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GCU_KUBERNETES=oldest GCU_NODE_CONTAINERD=1.6
# shellcheck source=lib/test-prelude.sh
. "$ROOT/scripts/lib/test-prelude.sh"
started=$(date +%s)
rc=0
.venv/bin/python -m pytest tests/test_engine_e2e.py tests/test_engine_realnode.py tests/test_realnode.py \
  tests/test_devtools_smoke.py tests/test_kube_support.py tests/test_engine_cluster_identity.py ${PARALLEL[@]+"${PARALLEL[@]}"} --durations=10 "$@" || rc=$?
echo "==> the oldest-Kubernetes leg ($(.venv/bin/python -c 'import devtools; print(devtools.kubernetes_version())')," \
  "containerd 1.6 nodes) took $(( $(date +%s) - started ))s, exit $rc" >&2
exit "$rc"
