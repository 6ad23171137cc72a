"""GcuNodes (pulumi-python:dynamic/gcu:GcuNodes): which nodes are GCU nodes, and the labels
gcu-stack manages on them. (The container runtime on those nodes: container_runtime.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from .bundled import Bundled, changed_inputs, inputs_of
from .cluster import core_api
from .node_labels import DEFAULT_DRIVER_LABEL, NodeLabeler, Selection


@dataclass
class GcuNodesInputs:
    """Every input of a GcuNodes resource, under its property name."""

    components: list[str]  # node agents whose deploy labels gcu-stack manages
    kubeconfig: Any = None  # path or content (a secret Output when content)
    context: Optional[str] = None
    names: list[str] = field(default_factory=list)
    selector: dict[str, str] = field(default_factory=dict)
    driverLabel: Optional[str] = DEFAULT_DRIVER_LABEL
    requireDriver: bool = False
    pageSize: int = 500


NODE_INPUTS = tuple(f.name for f in fields(GcuNodesInputs))
NODE_OUTPUTS = ("nodes", "drivers", "optedOut", "managedLabels", "drift")



# ---------------------------------------------------------------------------- GCU nodes


def _labeler(props: dict) -> NodeLabeler:
    return NodeLabeler(
        core_api(props.get("kubeconfig"), props.get("context")),
        Selection(names=tuple(props.get("names") or ()), selector=tuple(sorted((props.get("selector") or {}).items()))),
        components=tuple(props.get("components") or ()),
        driver_label=props.get("driverLabel"),
        page_size=int(props.get("pageSize") or 500),
    )


def _node_outputs(props: dict, report: Any) -> dict:
    return {
        **inputs_of(props, NODE_INPUTS),
        "nodes": report.gcu_nodes,
        "drivers": report.drivers,
        "optedOut": report.opted_out,
        "managedLabels": report.managed,
        "drift": report.drift,
    }


def _pending_writes(props: dict) -> int:
    """Labels the live cluster lacks (a new GCU node, a label removed by hand), so previews show them.

    A preview that cannot reach the cluster (a CI runner without credentials) still diffs on
    inputs; the update itself then reports the connection error.
    """
    try:
        return _labeler(props).pending_writes()
    except Exception:  # noqa: BLE001 - any failure to read live state means "unknown", not "changed"
        return 0


class GcuNodesProvider(ResourceProvider):
    serialize_as_secret_always = False

    def check(self, _olds: dict, news: dict):
        from pulumi.dynamic import CheckResult

        failures = []
        label = news.get("driverLabel")
        if label and "=" not in label:
            failures.append(pulumi.dynamic.CheckFailure("driverLabel", f"{label!r}: expected key=value"))
        return CheckResult(news, failures)

    def create(self, props: dict) -> CreateResult:
        report = _labeler(props).apply(require_driver=bool(props.get("requireDriver")))
        return CreateResult("gcu-nodes", _node_outputs(props, report))

    def read(self, id_: str, props: dict) -> ReadResult:
        # `pulumi refresh`: the live labels, with drift (a managed label removed by hand) spelled out.
        return ReadResult(id_, _node_outputs(props, _labeler(props).observe()))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        changed = changed_inputs(olds, news, NODE_INPUTS)
        if not changed and (olds.get("drift") or _pending_writes(news)):
            changed = ["nodes"]
        return DiffResult(changes=bool(changed), replaces=[], stables=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        report = _labeler(news).apply(require_driver=bool(news.get("requireDriver")))
        return UpdateResult(_node_outputs(news, report))

    def delete(self, _id: str, props: dict) -> None:
        _labeler(props).remove_all()


class GcuNodes(Bundled, module="gcu", name="GcuNodes"):
    """Outputs (attributes): nodes, drivers, optedOut, managedLabels, drift."""

    PROVIDER, OUTPUTS = GcuNodesProvider, NODE_OUTPUTS
