#!/usr/bin/env bash
# The toolchain step: the local control plane and docker (kube.sh), then the Pulumi CLI,
# language host and provider plugins (pulumi.sh). Both are cached under
# ~/.cache/gcu-stack/<tool>-<version>/ and skip whatever is already built.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
started=$(date +%s)
"$HERE/toolchain/kube.sh"
"$HERE/toolchain/pulumi.sh" build >/dev/null
echo "==> toolchain ready in $(( $(date +%s) - started ))s" >&2
