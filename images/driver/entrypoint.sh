#!/bin/sh
# gcu-driver-entrypoint: bring this node to the GCU kernel driver version this image
# carries, then stay up, so the DaemonSet pod is Ready exactly while that version is loaded.
# Standard POSIX sh and coreutils (ls, cat, tail, tr, mkdir, sleep, chroot): any distribution.
set -eu

DRIVER_DIR=${GCU_DRIVER_DIR:-/opt/enflame/driver}
VERSION_FILE=$DRIVER_DIR/VERSION
MODULE=${GCU_DRIVER_MODULE:-enflame}
SYSFS=${GCU_SYSFS_ROOT:-/sys}
PROC=${GCU_PROC_ROOT:-/proc}
DEVICE_FILES=${GCU_DEVICE_FILES:-/dev/gcu*}
# Unset: the image's rmmod, or, when the base has no kmod (Debian and Ubuntu base images
# have none), the host's, run in the host's root reached through hostPID.
if [ -n "${GCU_RMMOD:-}" ]; then
    RMMOD=$GCU_RMMOD
elif command -v rmmod >/dev/null 2>&1; then
    RMMOD=rmmod
else
    RMMOD="chroot $PROC/1/root rmmod"
fi
RETRY_SECONDS=${GCU_RETRY_SECONDS:-30}
LOG_DIR=${GCU_LOG_DIR:-/var/log/topscloud/gcu-driver}
STATUS_FILE=${GCU_STATUS_FILE:-/tmp/gcu-driver.status}
MODULE_DIR=$SYSFS/module/$MODULE

usage() {
    cat <<USAGE
Usage: gcu-driver-entrypoint [INSTALLER_ARGS...]
       gcu-driver-entrypoint --check | --version | --help

Makes this node run the GCU driver version this image carries (the DRIVER_VERSION
build argument, or the <version> of the package enflame-x86_64-<version>.run;
kept in $VERSION_FILE), then sleeps until the pod is stopped.
It compares that version with the loaded kernel module's $MODULE_DIR/version:

  not loaded         runs the installer $DRIVER_DIR/enflame-x86_64-*.run
                     (INSTALLER_ARGS and WITH_REBOOT passed on, output appended to
                     $LOG_DIR/install.log)
  same version       nothing to do
  another version    if the device is in use (module refcount above 0, holder modules
                     in $MODULE_DIR/holders/, or a process with a device file open,
                     found under $PROC/*/fd) it names what holds it, unloads nothing
                     and stays up, not Ready, checking again every GCU_RETRY_SECONDS:
                     once the workloads are gone (evicted, drained, finished) it
                     continues by itself. It does not exit: a crash loop would bury
                     the reason under restarts and back-off. Otherwise it unloads
                     the module ($RMMOD $MODULE) and runs the installer.

After installing, the loaded version must be the carried one, or it fails.

  --check    exit 0 only when kernel module $MODULE is loaded at the carried version
             (the readiness probe); otherwise say why, with the last status, and exit 1
  --version  print the carried driver version
  --help     this text

Exit codes: 0 stopped by SIGTERM/SIGINT (or --check: ready), 1 failure (no installer,
no version, installer failed, wrong version loaded after installing, unload failed),
2 GCU_RETRY_SECONDS not a number, 3 device in use and GCU_RETRY_SECONDS=0.

Environment:
  WITH_REBOOT         gcu-operator's driver setting, passed on to the installer (default: false)
  GCU_DRIVER_MODULE   kernel module of the driver (default: enflame)
  GCU_SYSFS_ROOT      where sysfs is mounted (default: /sys)
  GCU_PROC_ROOT       where the host's procfs is (default: /proc; the pod runs with hostPID)
  GCU_DEVICE_FILES    space-separated patterns of the GCU device files (default: /dev/gcu*)
  GCU_RMMOD           command that unloads a module, given its name, split on spaces
                      (default: rmmod, or "chroot \$GCU_PROC_ROOT/1/root rmmod", the
                      host's, when the image has none)
  GCU_RETRY_SECONDS   how often to look again while the device is in use (default: 30;
                      0: exit 3 at once instead)
  GCU_LOG_DIR         where the installer's output goes (default: /var/log/topscloud/gcu-driver)
  GCU_STATUS_FILE     last status, printed by --check (default: /tmp/gcu-driver.status)
  GCU_DRIVER_DIR      where the installer and VERSION are (default: /opt/enflame/driver)
USAGE
}

say() { echo "gcu-driver: $*"; }

# The last status, for --check (the probe's output shows in the pod's events).
# Written aside and renamed: the probe (--check) runs at any moment and must never read a half-written file.
status() {
    [ "$probe" = yes ] && return 0
    { printf '%s\n' "$*" >"$STATUS_FILE.new" && mv -f "$STATUS_FILE.new" "$STATUS_FILE"; } 2>/dev/null || :
}
probe=no

fail() {
    echo "gcu-driver: $*" >&2
    status "failed: $*"
    exit 1
}

# carried: the driver version this image installs.
read_carried() {
    carried=""
    if [ -r "$VERSION_FILE" ]; then
        read -r carried <"$VERSION_FILE" || :
    fi
    if [ -z "$carried" ]; then
        fail "no driver version in $VERSION_FILE: rebuild the image (build argument DRIVER_VERSION, or a package named enflame-x86_64-<version>.run)"
    fi
}

# loaded: yes/no; loaded_version: what the module reports ("" when it reports none).
read_loaded() {
    loaded=no
    loaded_version=""
    if [ -d "$MODULE_DIR" ]; then
        loaded=yes
        if [ -r "$MODULE_DIR/version" ]; then
            read -r loaded_version <"$MODULE_DIR/version" || :
        fi
    fi
}

describe_loaded() {
    if [ "$loaded" = no ]; then
        echo "kernel module $MODULE is not loaded ($MODULE_DIR does not exist)"
    elif [ -z "$loaded_version" ]; then
        echo "kernel module $MODULE is loaded but reports no version ($MODULE_DIR/version)"
    else
        echo "kernel module $MODULE $loaded_version is loaded"
    fi
}

is_device_file() {
    set -f
    for pattern in $DEVICE_FILES; do
        case $1 in
            $pattern) set +f; return 0 ;;
        esac
    done
    set +f
    return 1
}

# The pod a process runs in, from its environment (the runtime sets HOSTNAME, the pod's name, and the kubelet the
# service variables); empty for a process of no pod.
pod_of() {
    host=""
    in_pod=no
    while IFS= read -r var; do
        case $var in
            HOSTNAME=*) host=${var#HOSTNAME=} ;;
            KUBERNETES_SERVICE_HOST=*) in_pod=yes ;;
        esac
    done <<ENVIRON
$(tr '\0' '\n' <"$PROC/$1/environ" 2>/dev/null)
ENVIRON
    [ "$in_pod" = yes ] && echo "$host"
    return 0
}

# One line per open GCU device file: "pid N (command) [of pod P] has FILE open [cgroup ...]".
# One `ls` for all processes: a node runs thousands, a fork each would take seconds.
device_users() {
    set -- "$PROC"/[0-9]*/fd
    [ -d "$1" ] || return 0
    pid=${1#"$PROC"/}
    pid=${pid%/fd}
    ls -l "$@" 2>/dev/null | while IFS= read -r line; do
        case $line in
            "$PROC"/*/fd:)
                pid=${line#"$PROC"/}
                pid=${pid%/fd:}
                ;;
            *" -> "*)
                target=${line#* -> }
                is_device_file "$target" || continue
                comm="?"
                if [ -r "$PROC/$pid/comm" ]; then read -r comm <"$PROC/$pid/comm" || :; fi
                where=""
                if [ -r "$PROC/$pid/cgroup" ]; then
                    while IFS= read -r cgroup; do
                        case $cgroup in
                            *kubepods* | *docker* | *containerd* | *crio* | *libpod*)
                                where=" [cgroup ${cgroup#*:*:}]"
                                break
                                ;;
                        esac
                    done <"$PROC/$pid/cgroup"
                fi
                pod=$(pod_of "$pid")
                echo "pid $pid ($comm)${pod:+ of pod $pod} has $target open$where"
                ;;
        esac
    done
}

# held: what keeps the module in use, one item a line; empty when nothing does.
read_holders() {
    held=""
    refcnt=""
    if [ -r "$MODULE_DIR/refcnt" ]; then
        read -r refcnt <"$MODULE_DIR/refcnt" || :
    fi
    case $refcnt in
        "" | 0) ;;
        *) held="module refcount $refcnt ($MODULE_DIR/refcnt)" ;;
    esac
    modules=""
    for holder in "$MODULE_DIR"/holders/*; do
        if [ -e "$holder" ] || [ -L "$holder" ]; then
            modules="$modules${modules:+, }${holder##*/}"
        fi
    done
    if [ -n "$modules" ]; then
        held="$held${held:+
}holder modules: $modules ($MODULE_DIR/holders/)"
    fi
    users=$(device_users)
    if [ -n "$users" ]; then
        held="$held${held:+
}$users"
    fi
}

# Said in full when the holders change; every retry after that, one line.
report_held() {
    joined=""
    while IFS= read -r item; do
        joined="$joined${joined:+; }$item"
    done <<HELD
$held
HELD
    status "not ready: $1; the device is in use: $joined"
    if [ "$held" = "$last_held" ]; then
        say "still in use by the same holders; looking again in ${RETRY_SECONDS}s"
        return
    fi
    last_held=$held
    say "$1, and the device is in use, so nothing is unloaded. Held by:"
    printf '%s\n' "$held" | while IFS= read -r item; do
        echo "gcu-driver:   $item"
    done
    if [ "$RETRY_SECONDS" -gt 0 ]; then
        say "not Ready; looking again every ${RETRY_SECONDS}s (evict or stop what holds the device, e.g. kubectl drain, and this pod continues by itself)"
    fi
}

run_installer() {
    mkdir -p "$LOG_DIR"
    say "installing $installer_name (driver $carried; log: $LOG_DIR/install.log)"
    status "installing $installer_name (driver $carried)"
    echo "=== gcu-driver: $installer_name (driver $carried) ===" >>"$LOG_DIR/install.log"
    if ! WITH_REBOOT=${WITH_REBOOT:-false} sh "$installer" "$@" >>"$LOG_DIR/install.log" 2>&1; then
        tail -n 50 "$LOG_DIR/install.log" >&2
        fail "$installer_name failed; full log in $LOG_DIR/install.log on the node"
    fi
    say "installed $installer_name"
    read_loaded
    if [ "$loaded" = no ]; then
        fail "$installer_name finished but $(describe_loaded); see $LOG_DIR/install.log on the node (WITH_REBOOT=${WITH_REBOOT:-false})"
    fi
    if [ "$loaded_version" != "$carried" ]; then
        fail "after installing $installer_name, $(describe_loaded), not $carried (this image's version): build the image with DRIVER_VERSION set to the version the module reports, or check the package"
    fi
}

unload() {
    rmmod_command=${RMMOD%% *}
    if ! command -v "$rmmod_command" >/dev/null 2>&1; then
        fail "cannot unload $MODULE $loaded_version: '$rmmod_command' not found (GCU_RMMOD=$RMMOD); use a base image with kmod, or set GCU_RMMOD"
    fi
    say "unloading kernel module $MODULE ${loaded_version:-(no version)} with: $RMMOD $MODULE"
    # GCU_RMMOD may be a command with arguments, e.g. "chroot /host rmmod": split on purpose.
    # shellcheck disable=SC2086
    if ! output=$($RMMOD "$MODULE" 2>&1); then
        read_holders  # taken in the meantime?
        [ -n "$held" ] && return 1
        fail "$RMMOD $MODULE failed: $output"
    fi
    if [ -d "$MODULE_DIR" ]; then
        fail "$RMMOD $MODULE succeeded but $MODULE_DIR is still there"
    fi
}

# Sets state: ready or held.
reconcile() {
    state=ready
    read_loaded
    if [ "$loaded" = no ]; then
        say "$(describe_loaded); this image installs $carried"
        run_installer "$@"
    elif [ "$loaded_version" = "$carried" ]; then
        say "$(describe_loaded), the version this image installs; nothing to do"
    else
        situation="$(describe_loaded) but this image installs $carried"
        read_holders
        if [ -z "$held" ] && unload; then
            run_installer "$@"
        else
            report_held "$situation"
            state=held
        fi
    fi
}

check() {
    read_carried
    read_loaded
    if [ "$loaded" = yes ] && [ "$loaded_version" = "$carried" ]; then
        say "ready: kernel module $MODULE $carried is loaded"
        exit 0
    fi
    say "not ready: $(describe_loaded); this image installs $carried"
    if [ -s "$STATUS_FILE" ]; then
        echo "gcu-driver: last status: $(cat "$STATUS_FILE")"
    fi
    exit 1
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    --check) probe=yes; check ;;
    --version) read_carried; echo "$carried"; exit 0 ;;
esac

case $RETRY_SECONDS in
    "" | *[!0-9]*) echo "gcu-driver: GCU_RETRY_SECONDS must be a whole number of seconds, not '$RETRY_SECONDS'" >&2; exit 2 ;;
esac

installer=""
for candidate in "$DRIVER_DIR"/enflame-x86_64-*.run; do
    [ -f "$candidate" ] && installer=$candidate
done
if [ -z "$installer" ]; then
    fail "no enflame-x86_64-*.run in $DRIVER_DIR: rebuild the image with the TopsRider driver package"
fi
installer_name=${installer##*/}
read_carried

trap 'exit 0' TERM INT
last_held=""
while :; do
    reconcile "$@"
    [ "$state" = ready ] && break
    if [ "$RETRY_SECONDS" -eq 0 ]; then
        echo "gcu-driver: not unloading a module in use; GCU_RETRY_SECONDS=0, so giving up" >&2
        exit 3
    fi
    sleep "$RETRY_SECONDS" &
    wait $! || :
done

say "ready: kernel module $MODULE $carried is loaded"
status "ready: kernel module $MODULE $carried is loaded"
while :; do
    sleep 3600 &
    wait $! || :
done
