#!/bin/sh
# gcu-selfcheck: what gcu-stack's post-deploy validation pod runs by default
# (gcu-stack:validation, components/providers/node_validation.py). The pod asks for one
# GCU; the device plugin gives the container that GCU's device file(s). This lists
# the GCU device files the container was given and fails when there are none.
# POSIX sh only, so it runs in any image; exit 0: at least one, 1: none.
set -u

usage() {
    cat <<USAGE
Usage: gcu-selfcheck [--help]

Lists the GCU device files (character devices matching \$GCU_DEVICE_GLOB, default
/dev/gcu[0-9]*) given to this container and exits 1 when there are none.
Environment: GCU_DEVICE_GLOB, NODE_NAME (for the messages), GCU_RESOURCE.
USAGE
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
esac

pattern=${GCU_DEVICE_GLOB:-/dev/gcu[0-9]*}
node=${NODE_NAME:-this node}
found=0
# Unquoted on purpose: the shell expands the pattern(s); no match leaves the pattern itself.
for file in $pattern; do
    if [ -c "$file" ]; then
        echo "gcu-selfcheck: $file"
        found=$((found + 1))
    fi
done
if [ "$found" -eq 0 ]; then
    echo "gcu-selfcheck: no GCU device file ($pattern) in this container on $node: the ${GCU_RESOURCE:-GCU} request was granted without a device (is the driver loaded and the device plugin healthy?)" >&2
    exit 1
fi
echo "gcu-selfcheck: $found GCU device file(s) on $node"
