#!/usr/bin/env bash
# The Python side of gcu-stack, idempotent: .venv with requirements.txt (reinstalled only when requirements.txt
# changes) and the policy pack's link to it. Builds nothing else: the toolchain parts are scripts/toolchain.sh's,
# and the commands run only those they need. Prints nothing on stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
started=$(date +%s.%N)

python_bin="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv" >&2
  "$python_bin" -m venv .venv >&2 || {
    echo "setup.sh: ERROR: '$python_bin -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2
    exit 1; }
fi
stamp=".venv/.requirements.sha256"
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
what="cached"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "==> installing requirements.txt into .venv" >&2
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt >&2
  echo "$want" > "$stamp"
  what="installed requirements.txt"
fi
# The policy pack runs in the same interpreter environment (its requirements are a subset).
[ -e policies/.venv ] || ln -s ../.venv policies/.venv

secs="$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
if [ -n "${GCU_TIMINGS_FILE:-}" ]; then printf 'setup.sh/venv\t%s\t%s\n' "$secs" "$what" >> "$GCU_TIMINGS_FILE"; fi
if [ "$what" != cached ]; then echo "==> .venv ready in ${secs}s" >&2; fi
