#!/usr/bin/env bash
# The test command: set up (cached), then every test — unit tests under Pulumi mocks,
# real kube-apiserver/dockerd tests, real image builds and the end-to-end engine tests.
# Extra arguments go to pytest (e.g. scripts/test.sh -k gcu_nodes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
eval "$("$ROOT/scripts/toolchain/pulumi.sh" env)"
cd "$ROOT"
exec .venv/bin/python -m pytest tests "$@"
