#!/usr/bin/env bash
# Everything gcu-stack needs on this machine, idempotent and cached under ~/.cache/gcu-stack:
#   .venv with requirements.txt, then the toolchain step (scripts/toolchain.sh).
# Prints nothing on stdout but what `scripts/toolchain/pulumi.sh env` prints last.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

python_bin="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv" >&2
  "$python_bin" -m venv .venv >&2
fi
# Reinstall only when requirements.txt changed since the last install.
stamp=".venv/.requirements.sha256"
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "==> installing requirements.txt into .venv" >&2
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt >&2
  echo "$want" > "$stamp"
fi
# The policy pack runs in the same interpreter environment (its requirements are a subset).
[ -e policies/.venv ] || ln -s ../.venv policies/.venv

"$ROOT/scripts/toolchain.sh" >&2
