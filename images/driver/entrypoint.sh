#!/bin/sh
# gcu-driver-entrypoint: install the GCU kernel driver on this node, then stay up,
# so the DaemonSet pod is Ready exactly while the driver is in place.
set -eu

DRIVER_DIR=${GCU_DRIVER_DIR:-/opt/enflame/driver}
MODULE=${GCU_DRIVER_MODULE:-enflame}
LOG_DIR=${GCU_LOG_DIR:-/var/log/topscloud/gcu-driver}

usage() {
    cat <<USAGE
Usage: gcu-driver-entrypoint [--help] [INSTALLER_ARGS...]

Runs the TopsRider driver installer $DRIVER_DIR/enflame-x86_64-*.run on this node
(arguments are passed to it) unless kernel module '$MODULE' is already loaded,
then sleeps until the pod is stopped.

Environment:
  WITH_REBOOT        gcu-operator's driver setting, passed on to the installer
  GCU_DRIVER_MODULE  module whose presence means "installed" (default: enflame)
  GCU_LOG_DIR        where the installer's output goes (default: /var/log/topscloud/gcu-driver)
USAGE
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
esac

installer=""
for candidate in "$DRIVER_DIR"/enflame-x86_64-*.run; do
    [ -f "$candidate" ] && installer=$candidate
done
if [ -z "$installer" ]; then
    echo "gcu-driver: no enflame-x86_64-*.run in $DRIVER_DIR: rebuild the image with the TopsRider driver package" >&2
    exit 1
fi

if [ -d "/sys/module/$MODULE" ]; then
    echo "gcu-driver: kernel module $MODULE is loaded; nothing to install"
else
    mkdir -p "$LOG_DIR"
    echo "gcu-driver: installing $(basename "$installer") (log: $LOG_DIR/install.log)"
    if ! WITH_REBOOT=${WITH_REBOOT:-false} sh "$installer" "$@" >>"$LOG_DIR/install.log" 2>&1; then
        tail -n 50 "$LOG_DIR/install.log" >&2
        echo "gcu-driver: $(basename "$installer") failed; full log in $LOG_DIR/install.log on the node" >&2
        exit 1
    fi
    echo "gcu-driver: installed"
fi

trap 'exit 0' TERM INT
while :; do
    sleep 3600 &
    wait $! || true
done
