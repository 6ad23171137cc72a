"""A stand-in for Enflame's driver package, for the driver's pod on a devtools.realnode node.

The TopsRider installer ``enflame-x86_64-<version>.run`` builds the ``enflame`` kernel module and loads it; the
kernel then shows it as ``/sys/module/enflame`` (its version in ``version``), and ``rmmod`` takes it out. A real node
here has no GCU and this machine's kernel no such module, so the stand-in installer plays the node's kernel in a
directory of the node's own ``/dev`` (a tmpfs each real node has to itself, which the driver's pod mounts):
``sys/module/enflame/version`` is the loaded module and ``sbin/rmmod`` unloads it. The image's entrypoint
(images/driver/entrypoint.sh) is pointed there by two of its settings, GCU_SYSFS_ROOT and GCU_RMMOD (``driver_env``);
the rest runs as on a GCU node: the version check, finding the processes of the node that have a ``/dev/gcuN`` open
(the stand-in GCUs, which a GCU pod gets from the device plugin), refusing to unload under them, unloading,
installing, and the readiness probe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

KERNEL = "/dev/.gcu-standin-kernel"   # on the node, and in the driver's pod (hostPath /dev)
SYSFS = f"{KERNEL}/sys"
RMMOD = f"{KERNEL}/sbin/rmmod"
MODULE = "enflame"
RETRY_SECONDS = 3   # how often a driver pod kept from unloading looks again (the image's default: 30)

_INSTALLER = r"""#!/bin/sh
# gcu-stack stand-in for Enflame's driver installer enflame-x86_64-@VERSION@.run (devtools/standin_driver.py):
# "loads" kernel module enflame @VERSION@ into the stand-in kernel under GCU_SYSFS_ROOT, and puts the rmmod that
# unloads it beside it. Not the real program.
set -eu
version=@VERSION@
case "${1:-}" in -h | --help) echo "Usage: $0 (gcu-stack stand-in driver installer, enflame $version)"; exit 0 ;; esac
module=${GCU_DRIVER_MODULE:-enflame}
sysfs=${GCU_SYSFS_ROOT:?the stand-in driver installer loads its module under GCU_SYSFS_ROOT}
kernel=${sysfs%/sys}
if [ -d "$sysfs/module/$module" ]; then
    echo "insmod: ERROR: could not insert module $module.ko: File exists" >&2
    exit 1
fi
mkdir -p "$kernel/sbin" "$sysfs/module"
cat >"$kernel/sbin/rmmod.new" <<RMMOD
#!/bin/sh
# gcu-stack stand-in rmmod, put here by the stand-in driver installer: unloads a module of the stand-in kernel.
set -eu
dir=$sysfs/module/\${1:?usage: rmmod MODULE}
[ -d "\$dir" ] || { echo "rmmod: ERROR: Module \$1 is not currently loaded" >&2; exit 1; }
[ "\$(cat "\$dir/refcnt")" = 0 ] || { echo "rmmod: ERROR: Module \$1 is in use" >&2; exit 1; }
rm -rf "\$dir"
RMMOD
chmod 755 "$kernel/sbin/rmmod.new"
mv -f "$kernel/sbin/rmmod.new" "$kernel/sbin/rmmod"
# Loaded all at once, as the kernel shows a module: made aside, then renamed into place.
staged="$sysfs/module/.$module.loading"
rm -rf "$staged"
mkdir -p "$staged/holders"
echo 0 >"$staged/refcnt"
printf '%s\n' "$version" >"$staged/version"
mv "$staged" "$sysfs/module/$module"
echo "stand-in driver installer: loaded $module $version"
"""


def installer(version: str) -> bytes:
    """The stand-in ``enflame-x86_64-<version>.run``."""
    return _INSTALLER.replace("@VERSION@", version).encode()


def write_package(directory: Path, version: str) -> Path:
    """The stand-in package of driver `version` in `directory` (the only one there: the image takes one)."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("enflame-x86_64-*.run"):
        old.unlink()
    path = directory / f"enflame-x86_64-{version}.run"
    path.write_bytes(installer(version))
    path.chmod(0o755)
    return path


def driver_env() -> list[dict[str, str]]:
    """`spec.driver.env` pointing the image's entrypoint at the stand-in kernel."""
    return [{"name": "GCU_SYSFS_ROOT", "value": SYSFS}, {"name": "GCU_RMMOD", "value": RMMOD},
            {"name": "GCU_RETRY_SECONDS", "value": str(RETRY_SECONDS)}]


def loaded_version(node: Any) -> Optional[str]:
    """The driver version loaded on real node `node` (devtools.realnode.RealNode); None when none is."""
    try:
        return node.node_path(f"{SYSFS}/module/{MODULE}/version").read_text().strip()
    except FileNotFoundError:
        return None
