"""The GCU kernel driver installer: a privileged DaemonSet on every GCU node."""

from __future__ import annotations

from ..model import ComponentDef, ContainerDef, HostMount, ImageDef, Resources
from .common import GCU_LOGS, one

TOPSRIDER_DRIVER_HINT = (
    "download the TopsRider package and extract it (`chmod +x TopsRider_t2x_*_deb_internal_amd64.run && "
    "./TopsRider_t2x_*_deb_internal_amd64.run -x`), then copy TopsRider_t2x_*_deb_internal_amd64/driver/* there"
)

DRIVER = ComponentDef(
    key="driver",
    type_name="Driver",
    default_name="enflame-gcu-driver",
    default_image="gcu-driver",
    after=("gcuNodes",),
    installs_driver=True,
    workloads=one(
        ContainerDef(
            name="gcu-driver",
            # Privileged: it builds and loads the kernel module (insmod) and creates /dev nodes.
            privileged=True,
            mounts=(
                HostMount("lib-modules", "/lib/modules", "/lib/modules", read_only=False),
                HostMount("usr-src", "/usr/src", "/usr/src"),
                HostMount("dev", "/dev", "/dev", read_only=False),
                HostMount("host-os-release", "/etc/os-release", "/host-etc/os-release", type="File"),
                GCU_LOGS,
            ),
            resources=Resources("100m", "128Mi", "2", "2Gi"),
        ),
        host_pid=True,  # the installer loads kernel modules in the host's namespaces
    ),
    image=ImageDef(
        package="enflame-x86_64-*.run",
        source=TOPSRIDER_DRIVER_HINT,
        binary=None,
        dockerfile="driver",
        entrypoint="/usr/local/bin/gcu-driver-entrypoint",
    ),
)
