#!/usr/bin/env bash
# The toolchain step, in parts; each command asks only for the parts it needs.
#
#   scripts/toolchain.sh pulumi       the Pulumi CLI and the kubernetes provider plugin: the `pulumi` on PATH when it is
#                                     new enough and the engine has (or can install) the provider version the SDK asks
#                                     for (scripts/toolchain/pulumi.sh detect); otherwise, or with GCU_BUILD_PULUMI=1,
#                                     built from Go modules (scripts/toolchain/pulumi.sh build). scripts/gcu-stack.
#   scripts/toolchain.sh kube         the local control plane, etcd, kwok and the private dockerd/containerd packages
#                                     (scripts/toolchain/kube.sh). scripts/gcu-stack, when no cluster answers.
#   scripts/toolchain.sh pulumi kube  both (the embedded cluster).
#   scripts/toolchain.sh all          both, the Pulumi toolchain always built from Go modules (the tests drive the
#                                     engine with the built CLI, language host and provider). scripts/test.sh.
#
# When the Pulumi toolchain and the local control plane are both wanted, they build side by side (2 cores: the links
# and downloads of one overlap the compiles of the other), each logging to $GCU_CACHE_DIR/logs/{kube,pulumi}.log.
# stdout: `export` lines to eval (when the Pulumi toolchain was built); everything else goes to stderr. Every part
# prints its time; GCU_TIMINGS_FILE, when set, collects "part<TAB>seconds<TAB>what" lines (.ci/run prints them).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}"
PULUMI_SH="$HERE/toolchain/pulumi.sh"
KUBE_SH="$HERE/toolchain/kube.sh"

REPORT_TAG=toolchain.sh REPORT_WIDTH=12
# shellcheck source=toolchain/report.sh
. "$HERE/toolchain/report.sh"

# run_logged NAME LOG CMD... : CMD's stdout to "$LOG.out", stderr to "$LOG"; on failure print the log's tail.
run_logged() {
  local name="$1" log="$2" rc=0
  shift 2
  "$@" > "$log.out" 2> "$log" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "==> $name FAILED (exit $rc); last lines of $log:" >&2
    tail -n 80 "$log" >&2
  fi
  return "$rc"
}

both_side_by_side() {
  local t0 logs kpid ppid krc=0 prc=0 secs
  t0="$(now)"
  logs="$CACHE_DIR/logs"; mkdir -p "$logs"
  echo "==> toolchain: local Kubernetes (kube.sh) and Pulumi (pulumi.sh) side by side;" \
       "logs: $logs/kube.log, $logs/pulumi.log" >&2
  run_logged kube.sh "$logs/kube.log" "$KUBE_SH" build &
  kpid=$!
  run_logged pulumi.sh "$logs/pulumi.log" "$PULUMI_SH" build &
  ppid=$!
  wait "$kpid" || krc=$?
  wait "$ppid" || prc=$?
  # Each script's own timing summary.
  grep -h -A 20 -E '^\[(kube|pulumi)\.sh\] timings:' "$logs/kube.log" "$logs/pulumi.log" >&2 || true
  [ "$krc" = 0 ] && [ "$prc" = 0 ] || { echo "==> toolchain FAILED (kube.sh exit $krc, pulumi.sh exit $prc)" >&2; exit 1; }
  cat "$logs/pulumi.log.out"
  secs="$(elapsed "$t0")"
  if [ -n "${GCU_TIMINGS_FILE:-}" ]; then
    printf 'toolchain.sh (wall)\t%s\t%s\n' "$secs" "kube.sh + pulumi.sh side by side" >> "$GCU_TIMINGS_FILE"
  fi
  echo "==> toolchain ready in ${secs}s (wall; the two parts above overlapped)" >&2
}

[ $# -gt 0 ] || { echo "usage: scripts/toolchain.sh pulumi | kube | pulumi kube | all" >&2; exit 2; }
want_pulumi=0 want_kube=0 force="${GCU_BUILD_PULUMI:-0}"
for part in "$@"; do
  case "$part" in
    pulumi) want_pulumi=1 ;;
    kube) want_kube=1 ;;
    all) want_pulumi=1; want_kube=1; force=1 ;;
    *) echo "unknown part '$part' (pulumi, kube, all)" >&2; exit 2 ;;
  esac
done
build_pulumi=0
if [ "$want_pulumi" = 1 ]; then
  if [ "$force" = 1 ]; then
    echo "==> Pulumi: building the toolchain from Go modules ($([ "$*" = all ] && echo "the tests use it" \
      || echo GCU_BUILD_PULUMI=1))" >&2
    build_pulumi=1
  elif "$PULUMI_SH" detect; then
    :   # detect said which CLI and plugin it uses; nothing to export
  else
    echo "==> Pulumi: building the toolchain from Go modules (no usable installed CLI, see above)" >&2
    build_pulumi=1
  fi
fi
if [ "$build_pulumi" = 1 ] && [ "$want_kube" = 1 ]; then both_side_by_side
elif [ "$build_pulumi" = 1 ]; then "$PULUMI_SH" build
elif [ "$want_kube" = 1 ]; then "$KUBE_SH" build >&2   # stdout is for export lines only
fi
