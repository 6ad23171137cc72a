"""GCU feature discovery: labels each GCU node with its GCUs' count, family, model and memory."""

from __future__ import annotations

from ..model import ComponentDef, ContainerDef, ImageDef, RbacDef
from .common import DEV, SYS, TOPSCLOUD_HINT, one

GFD = ComponentDef(
    key="gfd",
    type_name="GcuFeatureDiscovery",
    default_name="enflame-gcu-feature-discovery",
    default_image="gcu-gfd",
    after=("devicePlugin", "gcusharePlugin"),
    uses_device=True,  # paused on a node while its driver is replaced
    workloads=one(
        ContainerDef(name="gcu-feature-discovery", args=("--sleep-interval=60s",), mounts=(DEV, SYS)),
    ),
    # Exactly what labelling its own node takes: read it and patch its labels.
    rbac=RbacDef(rules=({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},)),
    image=ImageDef(package="gcu-feature-discovery_*.tar.gz", source=TOPSCLOUD_HINT, binary="gcu-feature-discovery"),
)
