"""GCU node discovery and the labels gcu-stack manages on them.

The labels it adds are recorded in an annotation on each node, so that removal
touches only those, and only while they still hold the value gcu-stack set.
Planning is pure (`plan_node`); `NodeLabeler` talks to the API server; `GcuNodes` is the bundled
dynamic resource (pulumi-python:dynamic/gcu:GcuNodes) that applies them.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from ..names import (
    DEFAULT_DRIVER_LABEL,
    DEPLOY_LABEL_PREFIX,
    GCU_PRESENT_LABEL,
    NFD_LABELS_ANNOTATION,
    NFD_NODE_FEATURES,
    NFD_NODE_NAME_LABEL,
    NFD_PCI_LABEL,
    OPERANDS_LABEL,
    PAUSED_FOR_DRIVER_UPGRADE,
)
from .bundled import Bundled, bundled_diff, changed_inputs, inputs_of
from .cluster import checked_api, list_nodes
from .engine_watch import engine_watched

MANAGED_ANNOTATION = "gcu-stack.enflame.com/managed-labels"
OUR_VALUE = "true"
# Values a label of ours may hold and stay ours: a node agent paused while the driver under it is replaced.
OURS = (OUR_VALUE, PAUSED_FOR_DRIVER_UPGRADE)


@dataclass(frozen=True)
class Selection:
    """Which nodes are GCU nodes: the NFD PCI label, or an explicit list or selector."""

    names: tuple[str, ...] = ()
    selector: tuple[tuple[str, str], ...] = ()

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        if self.names:
            return name in self.names
        if self.selector:
            return all(labels.get(k) == v for k, v in self.selector)
        return labels.get(NFD_PCI_LABEL) == "true"


@dataclass(frozen=True)
class NodePlan:
    name: str
    patch_labels: dict[str, Optional[str]]
    recorded: tuple[str, ...]
    previous_recorded: tuple[str, ...]

    @property
    def needs_write(self) -> bool:
        return bool(self.patch_labels) or self.recorded != self.previous_recorded

    def patch(self, resource_version: str) -> dict:
        annotation = json.dumps(list(self.recorded)) if self.recorded else None
        return {
            "metadata": {
                # Optimistic concurrency: a concurrent writer makes this a 409, never a lost update.
                "resourceVersion": resource_version,
                "labels": self.patch_labels,
                "annotations": {MANAGED_ANNOTATION: annotation},
            }
        }


def recorded_labels(annotations: Optional[dict[str, str]]) -> tuple[str, ...]:
    raw = (annotations or {}).get(MANAGED_ANNOTATION)
    if not raw:
        return ()
    try:
        keys = json.loads(raw)
    except json.JSONDecodeError:
        return ()
    return tuple(sorted(k for k in keys if isinstance(k, str)))


def wanted_labels(components: tuple[str, ...]) -> dict[str, str]:
    wanted = {GCU_PRESENT_LABEL: OUR_VALUE}
    wanted.update({DEPLOY_LABEL_PREFIX + key: OUR_VALUE for key in components})
    return wanted


def opted_out(labels: dict[str, str]) -> bool:
    return labels.get(OPERANDS_LABEL) == "false"


def plan_node(name: str, labels: dict[str, str], annotations: dict[str, str], wanted: dict[str, str]) -> NodePlan:
    """What to write on one node so it carries `wanted` (empty: none of ours)."""
    previous = recorded_labels(annotations)
    # A label that exists with any value is the operator's (or NFD's): never overwritten.
    add = {k: v for k, v in wanted.items() if k not in labels}
    remove = [k for k in previous if k not in wanted and labels.get(k) == OUR_VALUE]
    kept = {k for k in previous if k in wanted and (k not in labels or labels.get(k) in OURS)}
    recorded = tuple(sorted(kept | set(add)))
    patch: dict[str, Optional[str]] = dict(add)
    patch.update({k: None for k in remove})
    return NodePlan(name, patch, recorded, previous)


def drift_of(name: str, labels: dict[str, str], annotations: dict[str, str], wanted: dict[str, str]) -> list[str]:
    """Human-readable differences between a node and what the stack wants there."""
    found = []
    for key in recorded_labels(annotations):
        if key not in labels:
            found.append(f"{name}: managed label {key} was removed")
        elif labels[key] not in OURS and key in wanted:
            found.append(f"{name}: managed label {key} changed to {labels[key]!r}")
    for key in wanted:
        if key not in labels and key not in recorded_labels(annotations):
            found.append(f"{name}: label {key} is missing")
    return found


@dataclass
class ApplyReport:
    gcu_nodes: list[str] = field(default_factory=list)
    opted_out: list[str] = field(default_factory=list)
    drivers: dict[str, bool] = field(default_factory=dict)
    managed: dict[str, list[str]] = field(default_factory=dict)
    drift: list[str] = field(default_factory=list)
    writes: int = 0
    vanished: list[str] = field(default_factory=list)


class DriverMissingError(Exception):
    pass


def driver_message(missing: list[str], driver_label: str) -> str:
    # The seed's error, with its two ways out.
    return (
        f"GCU node(s) {', '.join(missing)} have no GCU driver (no node label {driver_label}) and the spec "
        "does not deploy the driver. You should install the driver on the node in advance, or use "
        "gcu-resource to install the driver. Either: 1) install the Enflame driver (KMD) on every GCU node "
        "in advance; or 2) build the driver image (gcu-stack:images driver.build) and set "
        "spec.driver.notDeploy: false in the blueprint so the stack installs it."
    )


NFD_LABELLING_SECONDS = 120


def published_features(api: Any) -> set[str]:
    """The nodes whose NFD worker has published a NodeFeature (none where the NFD API is not installed)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        found = json.loads(client.CustomObjectsApi(api.api_client).list_cluster_custom_object(
            *NFD_NODE_FEATURES, _preload_content=False).data)
    except ApiException as error:
        if error.status == 404:
            return set()
        raise
    return {((item.get("metadata") or {}).get("labels") or {}).get(NFD_NODE_NAME_LABEL) for item in found.get("items") or []} - {None}


class NodeLabeler:
    """Lists nodes page by page and reconciles managed labels with bounded parallelism."""

    def __init__(
        self,
        api: Any,
        selection: Selection,
        components: tuple[str, ...],
        driver_label: Optional[str] = DEFAULT_DRIVER_LABEL,
        page_size: int = 500,
        workers: int = 16,
        max_attempts: int = 8,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.api = api
        self.selection = selection
        self.components = components
        self.driver_label = driver_label
        self.page_size = page_size
        self.workers = workers
        self.max_attempts = max_attempts
        self.sleep = sleep

    # -- reading -------------------------------------------------------------
    def list_nodes(self) -> list[dict]:
        return list_nodes(self.api, self.page_size)

    def _wanted(self, node: dict) -> dict[str, str]:
        meta = node["metadata"]
        labels = meta.get("labels") or {}
        if not self.selection.matches(meta["name"], labels) or opted_out(labels):
            return {}
        return wanted_labels(self.components)

    def _driver_present(self, labels: dict[str, str]) -> bool:
        if not self.driver_label:
            return True
        key, _, value = self.driver_label.partition("=")
        return labels.get(key) == (value or "true")

    def observe(self, nodes: Optional[list[dict]] = None) -> ApplyReport:
        report = ApplyReport()
        for node in nodes if nodes is not None else self.list_nodes():
            meta = node["metadata"]
            name, labels, annotations = meta["name"], meta.get("labels") or {}, meta.get("annotations") or {}
            if self.selection.matches(name, labels):
                report.gcu_nodes.append(name)
                report.drivers[name] = self._driver_present(labels)
                if opted_out(labels):
                    report.opted_out.append(name)
            recorded = recorded_labels(annotations)
            if recorded:
                report.managed[name] = [k for k in recorded if labels.get(k) == OUR_VALUE]
            report.drift.extend(drift_of(name, labels, annotations, self._wanted(node)))
        report.gcu_nodes.sort()
        report.opted_out.sort()
        return report

    def pending_writes(self) -> int:
        return sum(1 for node in self.list_nodes() if self._plan(node, remove_all=False).needs_write)

    # -- writing -------------------------------------------------------------
    def _plan(self, node: dict, remove_all: bool) -> NodePlan:
        meta = node["metadata"]
        wanted = {} if remove_all else self._wanted(node)
        return plan_node(meta["name"], meta.get("labels") or {}, meta.get("annotations") or {}, wanted)

    def await_nfd_labels(self, seconds: float = NFD_LABELLING_SECONDS) -> list[str]:
        """Wait until NFD's master has labelled every node whose worker published its features (a node that joined
        just before is not passed over as a node without GCUs); returns the nodes still unlabelled at the end."""
        deadline = time.monotonic() + seconds
        while True:
            published = published_features(self.api)
            waiting = sorted(n["metadata"]["name"] for n in self.list_nodes() if n["metadata"]["name"] in published
                             and NFD_LABELS_ANNOTATION not in (n["metadata"].get("annotations") or {}))
            if not waiting or time.monotonic() > deadline:
                return waiting
            self.sleep(1.0)

    def apply(self, require_driver: bool = False) -> ApplyReport:
        if not self.selection.names and not self.selection.selector:   # GCU nodes are what NFD labels
            self.await_nfd_labels()
        nodes = self.list_nodes()
        before = self.observe(nodes)
        if require_driver:
            missing = [n for n in before.gcu_nodes if not before.drivers[n] and n not in before.opted_out]
            if missing:
                # Checked before any write: a failed create leaves nothing behind.
                raise DriverMissingError(driver_message(missing, self.driver_label or ""))
        report = self._reconcile(nodes, remove_all=False)
        after = self.observe()
        after.writes, after.vanished = report.writes, report.vanished
        return after

    def remove_all(self) -> ApplyReport:
        return self._reconcile(self.list_nodes(), remove_all=True)

    def _reconcile(self, nodes: list[dict], remove_all: bool) -> ApplyReport:
        plans = [(node, self._plan(node, remove_all)) for node in nodes]
        todo = [(node, plan) for node, plan in plans if plan.needs_write]
        report = ApplyReport()
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for name, writes, vanished in pool.map(lambda item: self._write(item[0], item[1], remove_all), todo):
                report.writes += writes
                if vanished:
                    report.vanished.append(name)
        return report

    def _write(self, node: dict, plan: NodePlan, remove_all: bool) -> tuple[str, int, bool]:
        """Patch one node, re-reading and re-planning on conflict: (name, write requests, vanished)."""
        from kubernetes.client.exceptions import ApiException

        name = plan.name
        writes = 0
        for attempt in range(self.max_attempts):
            try:
                writes += 1
                self.api.patch_node(
                    name,
                    plan.patch(node["metadata"]["resourceVersion"]),
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
                return name, writes, False
            except ApiException as error:
                if error.status == 404:
                    return name, writes, True
                if error.status != 409 or attempt == self.max_attempts - 1:
                    raise
            self.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
            try:
                node = json.loads(self.api.read_node(name, _preload_content=False).data)
            except ApiException as error:
                if error.status == 404:
                    return name, writes, True
                raise
            plan = self._plan(node, remove_all)
            if not plan.needs_write:
                return name, writes, False
        return name, writes, False


# ---------------------------------------------------------------------------- the GcuNodes resource
# GcuNodes (pulumi-python:dynamic/gcu:GcuNodes): which nodes are GCU nodes, and the labels gcu-stack manages on
# them. (The container runtime on those nodes: container_runtime.py.)


@dataclass
class GcuNodesInputs:
    """Every input of a GcuNodes resource, under its property name."""

    components: list[str]  # node agents whose deploy labels gcu-stack manages
    kubeconfig: Any = None  # path or content (a secret Output when content)
    context: Optional[str] = None
    clusterUid: Any = None  # the stack's cluster (ClusterGuard's kube-system UID): any other is refused
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
        checked_api(props),
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

    @engine_watched
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
        return bundled_diff(olds, news, changed)

    @engine_watched
    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        report = _labeler(news).apply(require_driver=bool(news.get("requireDriver")))
        return UpdateResult(_node_outputs(news, report))

    @engine_watched
    def delete(self, _id: str, props: dict) -> None:
        _labeler(props).remove_all()


class GcuNodes(Bundled, module="gcu", name="GcuNodes"):
    """Outputs (attributes): nodes, drivers, optedOut, managedLabels, drift."""

    PROVIDER, OUTPUTS = GcuNodesProvider, NODE_OUTPUTS
