#!/usr/bin/env bash
# The Python side of gcu-stack, idempotent: .venv with requirements.txt (a link to a venv cached by interpreter and
# requirements.txt) and the policy pack's link to it. Builds nothing else: the toolchain parts are scripts/toolchain.sh's,
# and the commands run only those they need. Prints nothing on stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
started=$(date +%s.%N)

python_bin="${PYTHON:-python3}"
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
what="cached"

make_venv() {  # make_venv DIR: a venv with requirements.txt at DIR
  "$python_bin" -m venv "$1" >&2 || {
    echo "setup.sh: ERROR: '$python_bin -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2
    exit 1; }
  "$1/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt >&2
  echo "$want" > "$1/.requirements.sha256"
}

if [ -x .venv/bin/python ] && [ "$(cat .venv/.requirements.sha256 2>/dev/null)" = "$want" ]; then
  :   # up to date, wherever it is (a test's copy of a checkout links the checkout's, whatever GCU_CACHE_DIR says)
elif [ -d .venv ] && [ ! -L .venv ]; then
  # A venv of this checkout's own (made by hand, or before venvs were cached): kept, and updated in place.
  echo "==> installing requirements.txt into .venv" >&2
  [ -x .venv/bin/python ] || make_venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt >&2
  echo "$want" > .venv/.requirements.sha256
  what="installed requirements.txt"
else
  # .venv links to a venv cached by interpreter and requirements.txt (a fresh clone, as CI's, then installs nothing).
  # It is never changed once complete: install into it by hand only through requirements.txt.
  cache="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}/venv"
  version="$("$python_bin" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)" || {
    echo "setup.sh: ERROR: no Python at '$python_bin' (set PYTHON, or install python3)" >&2; exit 1; }
  venv="$cache/python$version-${want:0:16}"
  if [ ! -f "$venv/.complete" ]; then
    mkdir -p "$cache"
    (
      flock 9   # one build per venv, whichever clone asks first; the others wait for it
      if [ ! -f "$venv/.complete" ]; then
        echo "==> creating $venv (requirements.txt; cached for every checkout)" >&2
        rm -rf "$venv"
        make_venv "$venv"
        touch "$venv/.complete"
      fi
    ) 9>"$cache/.lock"
    what="installed requirements.txt into $venv"
  fi
  ln -sfn "$venv" .venv
fi
# The policy pack runs in the same interpreter environment (its requirements are a subset).
[ -e policies/.venv ] || ln -s ../.venv policies/.venv

secs="$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
if [ -n "${GCU_TIMINGS_FILE:-}" ]; then printf 'setup.sh/venv\t%s\t%s\n' "$secs" "$what" >> "$GCU_TIMINGS_FILE"; fi
if [ "$what" != cached ]; then echo "==> .venv ready in ${secs}s" >&2; fi
