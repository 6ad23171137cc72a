"""A read-only look at the live cluster for the preview: the GCU nodes as they are now.

`pulumi preview` shows what will happen on which nodes (a runtime left alone, the nodes of a
driver-upgrade wave): that needs the cluster as it is, before any bundled resource reports.
Reading is allowed to fail (a CI runner without credentials); callers say so and move on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .cluster import core_api, list_nodes
from .node_labels import Selection


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    runtime_version: str = ""
    unschedulable: bool = False


def gcu_nodes(kubeconfig: Any, context: Optional[str], selection: Selection, page_size: int = 500) -> list[NodeView]:
    """The nodes `selection` makes GCU nodes, as the API server has them now."""
    found = []
    for node in list_nodes(core_api(kubeconfig, context), page_size):
        meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
        labels = meta.get("labels") or {}
        if selection.matches(meta["name"], labels):
            found.append(
                NodeView(
                    name=meta["name"],
                    labels=labels,
                    annotations=meta.get("annotations") or {},
                    runtime_version=(status.get("nodeInfo") or {}).get("containerRuntimeVersion") or "",
                    unschedulable=bool(spec.get("unschedulable")),
                )
            )
    return sorted(found, key=lambda n: n.name)
