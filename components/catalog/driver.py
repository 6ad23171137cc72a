"""The GCU kernel driver installer: a privileged DaemonSet on every GCU node.

Its pods are Ready exactly while the driver version they carry is the one loaded
(`gcu-driver-entrypoint --check`). The DaemonSet is OnDelete: a new version is rolled out
node by node by its step (components/steps/driver_upgrade.py), never under a running job.
"""

from __future__ import annotations

from ..config import merged_settings
from ..model import ComponentDef, ContainerDef, HostMount, ImageDef, Resources
from ..spec import PooledFields
from ..steps.driver_upgrade import DRIVER_UPGRADE
from ..steps.validation import ValidationSettings
from .common import GCU_LOGS, one

ENTRYPOINT = "/usr/local/bin/gcu-driver-entrypoint"
# Ready: the carried version is loaded (not merely "the installer ran"); checked often, cheaply.
VERSION_LOADED = {"exec": {"command": [ENTRYPOINT, "--check"]}, "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 5}

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
    # spec.driver.pools: node pools with their own driver version, each its own DaemonSet and rollout.
    spec_model=PooledFields,
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
            readiness=VERSION_LOADED,
        ),
        host_pid=True,  # the installer loads kernel modules in the host's namespaces
        on_delete=True,  # a new version is rolled out by the step, node by node
    ),
    # The rollout's own settings, and validation's: a node is validated before it is uncordoned.
    settings=merged_settings("DriverSettings", DRIVER_UPGRADE.settings, ValidationSettings),
    then=DRIVER_UPGRADE,
    image=ImageDef(
        package="enflame-x86_64-*.run",
        source=TOPSRIDER_DRIVER_HINT,
        binary=None,
        dockerfile="driver",
        entrypoint=ENTRYPOINT,
    ),
)
