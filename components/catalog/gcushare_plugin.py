"""The GCU-share device plugin: shares each GCU's memory in units (`memoryUnit`) instead of whole GCUs."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BeforeValidator, Field

from ..model import BuildContext, ComponentDef, ContainerDef, Extras, ImageDef, PodAdditions, RbacDef, ResolvedComponent
from ..names import GCUSHARE_RESOURCE
from ..spec import DNS1123_SUBDOMAIN, BaseFields, matching, scalar_to_str
from .common import DEV, DEVICE_PLUGINS, TOPSCLOUD_HINT, one

MEMORY_UNITS = ("1", "0.1", "0.01", "0.001")


class GcuSharePluginSpec(BaseFields):
    # YAML reads 0.1 unquoted as a number: accepted (and so in the editor schema) as the string it stands for.
    memory_unit: Annotated[
        Literal[MEMORY_UNITS], BeforeValidator(scalar_to_str, json_schema_input_type=Union[Literal[MEMORY_UNITS], Literal[1, 0.1, 0.01, 0.001]])
    ] = Field("1", alias="memoryUnit")
    gcushare_nodes: list[Annotated[str, matching(DNS1123_SUBDOMAIN, "a node name", 253)]] = Field(
        default_factory=list, alias="gcushareNodes"
    )


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    unit = component.spec.memory_unit
    return Extras(
        pod=PodAdditions(
            args=(f"--memory-unit={unit}",),
            env={"MEMORY_UNIT": unit},
            # gcushareNodes: only those nodes share their GCUs; empty means every GCU node.
            node_names=tuple(component.spec.gcushare_nodes),
        )
    )


GCUSHARE_PLUGIN = ComponentDef(
    key="gcusharePlugin",
    type_name="GcuSharePlugin",
    default_name="gcushare-device-plugin",
    default_image="gcushare-device-plugin",
    spec_model=GcuSharePluginSpec,
    # It takes the device plugin's place in the chain.
    uses_device=True,  # paused on a node while its driver is replaced
    after=("toolkit",),
    workloads=one(
        ContainerDef(
            name="gcushare-device-plugin",
            args=(f"--resource-name={GCUSHARE_RESOURCE}",),
            mounts=(DEVICE_PLUGINS, DEV),
        ),
    ),
    # Advertise shares on its node and record which GCU a scheduled pod got (pod annotations).
    rbac=RbacDef(
        rules=(
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        )
    ),
    extras=extras,
    image=ImageDef(package="gcushare-device-plugin_*.tar.gz", source=TOPSCLOUD_HINT, binary="gcushare-device-plugin"),
)
