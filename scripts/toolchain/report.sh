# Shared by kube.sh and pulumi.sh (sourced, not run): how a toolchain script talks and times its parts.
#
# Set before sourcing:
#   REPORT_TAG      the prefix of every line, e.g. kube.sh
#   REPORT_WIDTH    the width of the part-name column in the timings table
#
#   log/warn/die MSG       one line on stderr ([TAG] MSG, [TAG] WARNING: MSG, [TAG] ERROR: MSG and exit 1)
#   now; elapsed START     seconds since the epoch; seconds since START, one decimal
#   timing PART SECS NOTE  records a part (also in $GCU_TIMINGS_FILE, which .ci/run prints at the end)
#   print_timings          the table of every part recorded so far, on stderr

log() { echo "[$REPORT_TAG] $*" >&2; }
warn() { echo "[$REPORT_TAG] WARNING: $*" >&2; }
die() { echo "[$REPORT_TAG] ERROR: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

TIMINGS=()
timing() {
  TIMINGS+=("$(printf "%-${REPORT_WIDTH}s %8ss  %s" "$1" "$2" "$3")")
  log "$1: $3 in $2s"
  if [ -n "${GCU_TIMINGS_FILE:-}" ]; then printf '%s/%s\t%s\t%s\n' "$REPORT_TAG" "$1" "$2" "$3" >> "$GCU_TIMINGS_FILE"; fi
}

print_timings() {
  { echo "[$REPORT_TAG] timings:"; printf "[$REPORT_TAG]   %s\n" "${TIMINGS[@]}"; } >&2
}
