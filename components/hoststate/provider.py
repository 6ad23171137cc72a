"""Pulumi dynamic providers for what Kubernetes objects cannot express.

`GcuNodes` (pulumi-python:dynamic/gcu:GcuNodes): which nodes are GCU nodes, and the
labels gcu-stack manages on them. `DockerRuntime` (pulumi-python:dynamic/gcu:DockerRuntime):
docker's default runtime on those nodes, restored exactly on delete.

The providers hold no clients and read no globals: every call builds what it needs
from the resource's own inputs, so the pickled provider carries no state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from . import runtime_host
from .cluster import core_api
from .node_labels import DEFAULT_DRIVER_LABEL, NodeLabeler, Selection
from .transports import transport_for


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


@dataclass
class DockerRuntimeInputs:
    """Every input of a DockerRuntime resource, under its property name."""

    nodes: Any  # the GCU node names (an Output of GcuNodes)
    transport: str
    mode: str
    runtimePath: str
    daemonJson: str
    dockerHost: str
    pidFile: str
    restartCommand: list[str]
    podImage: Any
    podNamespace: str
    timeoutSeconds: int
    verifySeconds: float
    kubeconfig: Any = None
    context: Optional[str] = None


def as_props(inputs: Any) -> dict:
    """An inputs dataclass as resource properties (not dataclasses.asdict: it deep-copies Outputs)."""
    return {f.name: getattr(inputs, f.name) for f in fields(inputs)}


NODE_INPUTS = tuple(f.name for f in fields(GcuNodesInputs))
NODE_OUTPUTS = ("nodes", "drivers", "optedOut", "managedLabels", "drift")
RUNTIME_INPUTS = tuple(f.name for f in fields(DockerRuntimeInputs))
RUNTIME_OUTPUTS = ("hosts", "active", "message", "drift")


def _inputs(props: dict, keys: tuple[str, ...]) -> dict:
    return {k: props.get(k) for k in keys}


def _changed(olds: dict, news: dict, keys: tuple[str, ...]) -> list[str]:
    # Only our own inputs: the serialized provider (__provider) changes with the code, not the node.
    return [k for k in keys if olds.get(k) != news.get(k)]


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
        **_inputs(props, NODE_INPUTS),
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
        changed = _changed(olds, news, NODE_INPUTS)
        if not changed and (olds.get("drift") or _pending_writes(news)):
            changed = ["nodes"]
        return DiffResult(changes=bool(changed), replaces=[], stables=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        report = _labeler(news).apply(require_driver=bool(news.get("requireDriver")))
        return UpdateResult(_node_outputs(news, report))

    def delete(self, _id: str, props: dict) -> None:
        _labeler(props).remove_all()


class _Bundled(pulumi.dynamic.Resource):
    """A bundled dynamic resource: its inputs dataclass as properties, its outputs unknown until the provider reports.

    Every property is an Output attribute of the resource (e.g. `GcuNodes(...).nodes`).
    """

    PROVIDER: type[ResourceProvider]
    OUTPUTS: tuple[str, ...]

    def __init__(self, name: str, inputs: Any, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(self.PROVIDER(), name, {**as_props(inputs), **dict.fromkeys(self.OUTPUTS)}, opts)


class GcuNodes(_Bundled, module="gcu", name="GcuNodes"):
    """Outputs (attributes): nodes, drivers, optedOut, managedLabels, drift."""

    PROVIDER, OUTPUTS = GcuNodesProvider, NODE_OUTPUTS


# ---------------------------------------------------------------------------- docker runtime


def _runtime_outputs(props: dict, hosts: dict, drift: Optional[list] = None) -> dict:
    active = [h.get("active") for h in hosts.values()]
    if props.get("mode") == "none":
        message = "daemon.json written; docker uses the enflame runtime only after its next restart"
    elif hosts and all(active):
        message = f"enflame is docker's default runtime on {len(hosts)} host(s)"
    else:
        message = "no GCU node" if not hosts else "not active everywhere"
    return {
        **_inputs(props, RUNTIME_INPUTS),
        "hosts": hosts,
        # No GCU node: nothing to activate, as a DaemonSet with nothing to schedule is ready.
        "active": all(active),
        "message": message,
        "drift": drift or [],
    }


def _activate_all(props: dict, targets: dict[str, list[str]], previous: dict) -> dict:
    """Activate on every target host; if one fails, undo the ones done in this call, then fail."""
    transport = transport_for(props)
    done: dict[str, dict] = {}
    try:
        for host, nodes in targets.items():
            state = transport.activate(host, nodes, props["runtimePath"], props["mode"])
            if host in previous and previous[host].get("original") is not None:
                # The first original stays authoritative across updates.
                state["original"] = previous[host]["original"]
            done[host] = {"nodes": nodes, **state}
    except Exception:
        for host, state in done.items():
            if host not in previous:
                try:
                    transport.restore(host, state["nodes"], state, props["mode"])
                except Exception:  # noqa: BLE001 - the activation error is the one to report
                    pass
        raise
    return done


class DockerRuntimeProvider(ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props: dict) -> CreateResult:
        transport = transport_for(props)
        hosts = _activate_all(props, transport.hosts(list(props.get("nodes") or [])), {})
        return CreateResult("docker-runtime", _runtime_outputs(props, hosts))

    def read(self, id_: str, props: dict) -> ReadResult:
        transport = transport_for(props)
        hosts = dict(props.get("hosts") or {})
        drift = []
        for host, state in hosts.items():
            seen = transport.inspect(host, state.get("nodes", []))
            if seen is None:
                continue
            if seen["content"] != state.get("written"):
                drift.append(f"{host}: {props['daemonJson']} differs from what gcu-stack wrote")
            if props.get("mode") != "none":
                active = seen["defaultRuntime"] == runtime_host.RUNTIME_NAME
                if not active:
                    drift.append(f"{host}: docker's default runtime is {seen['defaultRuntime']!r}")
                hosts[host] = {**state, "active": active}
        return ReadResult(id_, _runtime_outputs(props, hosts, drift))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        changed = _changed(olds, news, RUNTIME_INPUTS)
        if not changed and olds.get("drift"):
            changed = ["hosts"]
        # A host's docker is a singleton: every change is an in-place update, never a replacement.
        return DiffResult(changes=bool(changed), replaces=[], stables=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict, news: dict) -> UpdateResult:
        transport = transport_for(news)
        previous = dict(olds.get("hosts") or {})
        targets = transport.hosts(list(news.get("nodes") or []))
        moved = olds.get("transport") != news.get("transport") or olds.get("daemonJson") != news.get("daemonJson")
        old_transport = transport_for(olds)
        for host, state in previous.items():
            if moved or host not in targets:
                old_transport.restore(host, state.get("nodes", []), state, olds["mode"])
        kept = {} if moved else {h: s for h, s in previous.items() if h in targets}
        hosts = _activate_all(news, targets, kept)
        return UpdateResult(_runtime_outputs(news, hosts))

    def delete(self, _id: str, props: dict) -> None:
        transport = transport_for(props)
        failures = []
        for host, state in (props.get("hosts") or {}).items():
            try:
                transport.restore(host, state.get("nodes", []), state, props["mode"])
            except Exception as error:  # noqa: BLE001 - restore the others, then report every failure
                failures.append(f"{host}: {error}")
        if failures:
            raise RuntimeError("could not restore docker's runtime config on: " + "; ".join(failures))


class DockerRuntime(_Bundled, module="gcu", name="DockerRuntime"):
    """Outputs (attributes): hosts, active, message, drift."""

    PROVIDER, OUTPUTS = DockerRuntimeProvider, RUNTIME_OUTPUTS
