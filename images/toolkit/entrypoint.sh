#!/bin/sh
# gcu-runtime-entrypoint: put the enflame container runtime on this node, activate it through
# the node's container runtime (node_runtime.py: docker or containerd, per node), then stay up —
# so a node that joins later gets the runtime without another `pulumi up`.
set -eu

NODE_RUNTIME=/opt/gcu-stack/node_runtime.py
SOURCE=/usr/local/enflame
# The host's /usr/local/enflame is mounted at $HOST_ROOT/usr/local/enflame.
HOST_ROOT=${HOST_ROOT:-/host}

usage() {
    cat <<USAGE
Usage: gcu-runtime-entrypoint [--help] [ACTIVATE_ARGS...]

1. Copies $SOURCE (the enflame container runtime) to $HOST_ROOT$SOURCE.
2. Runs: python3 $NODE_RUNTIME activate [ACTIVATE_ARGS...]
   which reads CONTAINER_RUNTIME (auto: this node's runtime, from the API server) and NODE_NAME,
   then docker's settings (RUNTIME_ACTIVATION, ENFLAME_RUNTIME_PATH, DAEMON_JSON, DOCKER_HOST,
   DOCKER_PID_FILE, DOCKER_RESTART_COMMAND) or containerd's (CONTAINERD_ACTIVATION,
   CONTAINERD_CONFIG, CONTAINERD_DROPIN, CONTAINERD_ADDRESS, CONTAINERD_RESTART_COMMAND,
   CONTAINERD_SET_DEFAULT, HOST_ROOT).
3. Sleeps until the pod is stopped.

USAGE
}

case "${1:-}" in
    -h | --help) usage; exec python3 "$NODE_RUNTIME" --help ;;
esac

# Each file goes in by rename: a runtime binary docker is executing is never rewritten in place.
(cd "$SOURCE" && find . -type f) | while IFS= read -r file; do
    file=${file#./}
    target="$HOST_ROOT$SOURCE/$file"
    if ! cmp -s "$SOURCE/$file" "$target"; then
        mkdir -p "$(dirname "$target")"
        cp -p "$SOURCE/$file" "$target.gcu-stack-new"
        mv -f "$target.gcu-stack-new" "$target"
        echo "gcu-runtime: installed $SOURCE/$file"
    fi
done

python3 "$NODE_RUNTIME" activate "$@"

trap 'exit 0' TERM INT
while :; do
    sleep 3600 &
    wait $! || true
done
