"""The GCU-node labels: which nodes are GCU nodes, and the deploy labels of the node agents.

A link of the chain right after NFD (it reads NFD's PCI label): every node agent waits
for it, because their DaemonSets select the labels it sets.
"""

from __future__ import annotations

import pulumi
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import one_setting
from ..model import StepContext, StepDef, StepResult
from ..names import DEFAULT_DRIVER_LABEL
from ..spec import DNS1123_SUBDOMAIN, node_selector

KEY = "gcuNodes"


class GcuNodesOptions(BaseModel):
    """`gcu-stack:gcuNodes`: which nodes are GCU nodes and how a pre-installed driver shows."""

    model_config = ConfigDict(extra="forbid")

    # Explicit node names, or a label selector; neither: nodes NFD labels with PCI vendor 1e36.
    names: list[str] = Field(default_factory=list)
    selector: dict[str, str] = Field(default_factory=dict)
    # key=value label that marks a node whose GCU driver is installed; "" turns the check off.
    driver_label: str = Field(DEFAULT_DRIVER_LABEL, alias="driverLabel")
    page_size: int = Field(500, alias="pageSize", ge=1, le=5000)

    @field_validator("names")
    @classmethod
    def _node_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
                raise ValueError(f"{name!r} cannot be a node name (lower-case letters, digits, '-' and '.', at most 253)")
        return value

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        return node_selector(value) or {}

    @field_validator("driver_label")
    @classmethod
    def _key_value(cls, value: str) -> str:
        if value and "=" not in value:
            raise ValueError(f"{value!r}: expected key=value, e.g. {DEFAULT_DRIVER_LABEL}")
        if value:
            key, _, label = value.partition("=")
            node_selector({key: label})  # the label's key and value, held to the API server's rules
        return value


GcuNodesSettings = one_setting("GcuNodesSettings", "gcu_nodes", "gcuNodes", GcuNodesOptions)


def declare(context: StepContext) -> StepResult:
    from ..providers.node_labels import GcuNodes, GcuNodesInputs, Selection  # engine code: only when declaring

    selection = context.settings.gcu_nodes
    # Deploy labels only for the node agents whose scheduling honours them.
    agents = sorted(c.definition.key for c in context.deployed if c.definition.gcu_nodes_only)
    resource = GcuNodes(
        "gcu-nodes",
        GcuNodesInputs(
            components=agents,
            kubeconfig=context.cluster.kubeconfig,
            context=context.cluster.context,
            clusterUid=context.cluster.uid,
            names=list(selection.names),
            selector=dict(selection.selector),
            driverLabel=selection.driver_label or None,
            # Without a component that installs the driver, every GCU node must already have one (seed FAQ).
            requireDriver=not any(c.definition.installs_driver for c in context.deployed),
            pageSize=selection.page_size,
        ),
        pulumi.ResourceOptions(parent=context.parent, depends_on=context.after or None, provider=context.host_provider),
    )
    return StepResult(
        resource=resource,
        done=pulumi.Output.from_input(True),
        # A list even before the resource reports (preview, or a provider that omits it).
        outputs={"clusterGCUNodes": resource.nodes.apply(lambda nodes: list(nodes or []))},
        # How a step reading the live cluster at preview time tells GCU nodes (before this resource reports).
        facts={"selection": Selection(names=tuple(selection.names), selector=tuple(sorted(selection.selector.items())))},
    )


GCU_NODES = StepDef(
    key=KEY, after=("nfd",), declare=declare, settings=GcuNodesSettings, empty_outputs=(("clusterGCUNodes", []),)
)
