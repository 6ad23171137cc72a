#!/usr/bin/env bash
# The toolchain step, in parts; each command runs only the parts it needs.
#
#   scripts/toolchain.sh pulumi   the Pulumi CLI and the kubernetes provider plugin: the `pulumi` on PATH when it is
#                                 new enough and the engine has (or can install) the provider version the SDK asks
#                                 for (scripts/toolchain/pulumi.sh detect); otherwise, or with GCU_BUILD_PULUMI=1,
#                                 built from Go modules (scripts/toolchain/pulumi.sh build). Used by scripts/gcu-stack.
#   scripts/toolchain.sh kube     the local control plane, kwok, etcd and the private dockerd/containerd packages
#                                 (scripts/toolchain/kube.sh). Used by scripts/gcu-stack when no cluster answers.
#   scripts/toolchain.sh all      both, the Pulumi toolchain always built from Go modules (the tests drive the
#                                 engine with the built CLI, language host and provider). Used by scripts/test.sh.
#                                 When both have something to build they build side by side (2 cores: the links of
#                                 one overlap the compiles of the other), each logging to $GCU_CACHE_DIR/logs/.
#
# stdout: `export` lines to eval (pulumi, all); everything else goes to stderr. Every part prints its time;
# GCU_TIMINGS_FILE, when set, collects "part<TAB>seconds<TAB>what" lines (.ci/run prints them).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}"
PULUMI_SH="$HERE/toolchain/pulumi.sh"
KUBE_SH="$HERE/toolchain/kube.sh"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

pulumi_part() {
  if [ "${GCU_BUILD_PULUMI:-0}" = 1 ]; then
    echo "==> Pulumi: building the toolchain from Go modules (GCU_BUILD_PULUMI=1)" >&2
  elif "$PULUMI_SH" detect; then
    return 0     # detect said which CLI and plugin; nothing to export
  else
    echo "==> Pulumi: building the toolchain from Go modules (no usable installed CLI, see above)" >&2
  fi
  "$PULUMI_SH" build
}

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

all_parts() {
  local t0 logs kpid ppid krc=0 prc=0
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
  local secs; secs="$(elapsed "$t0")"
  if [ -n "${GCU_TIMINGS_FILE:-}" ]; then printf 'toolchain.sh/all (wall)\t%s\t%s\n' "$secs" "kube.sh + pulumi.sh" >> "$GCU_TIMINGS_FILE"; fi
  echo "==> toolchain ready in ${secs}s (wall; the parts above overlapped)" >&2
}

part="${1:-}"
case "$part" in
  pulumi) pulumi_part ;;
  kube) "$KUBE_SH" build ;;
  all) all_parts ;;
  *) echo "usage: scripts/toolchain.sh pulumi | kube | all" >&2; exit 2 ;;
esac
