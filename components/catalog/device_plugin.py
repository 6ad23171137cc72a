"""The GCU device plugin: advertises enflame.com/gcu to the kubelet on every GCU node."""

from __future__ import annotations

from ..model import ComponentDef, ContainerDef, ImageDef
from ..names import GCU_RESOURCE
from .common import DEV, DEVICE_PLUGINS, TOPSCLOUD_HINT, one

DEVICE_PLUGIN = ComponentDef(
    key="devicePlugin",
    type_name="DevicePlugin",
    default_name="enflame-gcu-k8s-plugin",
    default_image="gcu-plugin",
    # The seed's field table calls it `plugin`; its example blueprint says `devicePlugin`.
    spec_aliases=("plugin",),
    excludes=("gcusharePlugin",),
    uses_device=True,  # paused on a node while its driver is replaced
    after=("toolkit",),
    workloads=one(
        ContainerDef(
            name="gcu-plugin",
            args=(f"--resource-name={GCU_RESOURCE}",),
            mounts=(DEVICE_PLUGINS, DEV),
        ),
    ),
    image=ImageDef(package="gcu-k8s-plugin_*.tar.gz", source=TOPSCLOUD_HINT, binary="gcu-k8s-plugin"),
)
