"""ContainerRuntime (pulumi-python:dynamic/gcu:ContainerRuntime): the enflame runtime on every GCU node.

Each node gets it through the runtime that node actually runs, read from its
`status.nodeInfo.containerRuntimeVersion` (or forced by a setting): docker (daemon.json)
or containerd (a drop-in). A node with another runtime is reported and left alone.
Delete puts back exactly what was changed. The provider holds no clients and reads no
globals: every call builds what it needs from the resource's own properties.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from ..node.node_runtime import SUPPORTED, runtime_of
from .bundled import Bundled, bundled_diff, changed_inputs, inputs_of
from .cluster import core_api, ensure_cluster
from .engine_watch import engine_watched
from .transports import transport_for

# Where a runtime's files live: a change of these moves the state, so the old place is restored first.
LOCATION = {"docker": ("transport", "daemonJson", "dockerHost", "pidFile"), "containerd": ("transport", "configToml", "dropin", "address")}
PARALLEL = 8  # nodes changed at once (each: one short pod, or the local runtime)


@dataclass
class ContainerRuntimeInputs:
    """Every input of a ContainerRuntime resource, under its property name."""

    nodes: Any  # the GCU node names (an Output of GcuNodes)
    runtime: str  # auto (per node) | docker | containerd
    docker: dict  # DockerRuntimeOptions by alias: mode, transport, runtimePath, daemonJson, dockerHost, pidFile, ...
    containerd: dict  # ContainerdOptions by alias: mode, transport, runtimePath, configToml, dropin, address, ...
    podImage: Any
    podNamespace: str
    timeoutSeconds: int
    kubeconfig: Any = None
    context: Optional[str] = None
    clusterUid: Any = None  # the stack's cluster (ClusterGuard's kube-system UID): any other is refused


INPUTS = tuple(ContainerRuntimeInputs.__dataclass_fields__)
OUTPUTS = ("hosts", "runtimes", "unsupported", "active", "message", "drift")
# A DockerRuntime of an earlier release kept docker's settings at the top level.
LEGACY_DOCKER = ("transport", "mode", "runtimePath", "daemonJson", "dockerHost", "pidFile", "restartCommand", "verifySeconds")


def normalise(props: dict) -> dict:
    """Properties in this release's shape, also for a resource an earlier release (DockerRuntime) created."""
    if props.get("docker") is None:
        props = {**props, "docker": {k: props.get(k) for k in LEGACY_DOCKER}, "runtime": props.get("runtime") or "docker"}
    if props.get("hosts"):  # that release's hosts were all docker hosts, and did not say so
        props = {**props, "hosts": {h: {"runtime": "docker", **s} for h, s in props["hosts"].items()}}
    return props


def node_runtimes(props: dict) -> tuple[dict[str, str], dict[str, str]]:
    """({node: runtime} for the nodes gcu-stack supports, {node: runtime version} for the others)."""
    nodes = sorted(props.get("nodes") or [])
    forced = props.get("runtime") or "auto"
    if forced != "auto":
        return {n: forced for n in nodes}, {}
    from kubernetes.client.exceptions import ApiException

    api = core_api(props.get("kubeconfig"), props.get("context"))  # ensure_cluster checked it already
    found, unsupported = {}, {}
    for node in nodes:
        try:
            info = json.loads(api.read_node(node, _preload_content=False).data)["status"].get("nodeInfo") or {}
        except ApiException as error:
            if error.status == 404:
                continue  # the node left the cluster since GcuNodes listed it
            raise
        version = info.get("containerRuntimeVersion") or ""
        runtime = runtime_of(version)
        if runtime in SUPPORTED:
            found[node] = runtime
        else:
            unsupported[node] = version or "(none reported)"
    return found, unsupported


def plan_hosts(props: dict, runtimes: dict[str, str]) -> dict[str, dict]:
    """{host: {"runtime", "nodes"}}: each runtime's nodes, grouped by that runtime's transport."""
    targets: dict[str, dict] = {}
    for runtime in SUPPORTED:
        nodes = [n for n, r in runtimes.items() if r == runtime]
        for host, members in transport_for(props, runtime).hosts(nodes).items():
            targets[host] = {"runtime": runtime, "nodes": members}
    return targets


def _outputs(props: dict, hosts: dict, runtimes: dict, unsupported: dict, drift: Optional[list] = None) -> dict:
    written_only = sorted(h for h, s in hosts.items() if props[s["runtime"]]["mode"] == "none")
    active = [bool(s.get("active")) or h in written_only for h, s in hosts.items()]
    left = f"; left alone (unsupported runtime): {', '.join(f'{n} ({v})' for n, v in sorted(unsupported.items()))}" if unsupported else ""
    if not hosts:
        message = "no GCU node"
    elif written_only:
        message = (
            f"config written on {', '.join(written_only)} (mode none): the container runtime uses the enflame "
            "runtime only after its next restart"
        )
    elif all(active):
        message = f"enflame runtime active on {len(runtimes)} node(s) ({len(hosts)} host(s))"
    else:
        message = "not active everywhere"
    return {
        **inputs_of(props, INPUTS),
        "hosts": hosts,
        "runtimes": runtimes,
        "unsupported": unsupported,
        # No GCU node: nothing to activate, as a DaemonSet with nothing to schedule is ready.
        "active": all(active),
        "message": message + left,
        "drift": drift or [],
    }


def _each(work: dict, call) -> tuple[dict, dict]:
    """Run `call(host, target)` for every host, a few at a time: (results, errors) by host."""
    results, errors = {}, {}

    def one(item):
        host, target = item
        try:
            return host, call(host, target), None
        except Exception as error:  # noqa: BLE001 - every host is tried; all failures are reported
            return host, None, error

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for host, result, error in pool.map(one, work.items()):
            if error is None:
                results[host] = result
            else:
                errors[host] = error
    return results, errors


def _activate_all(props: dict, targets: dict, previous: dict) -> dict:
    """Activate on every target host; if any fails, undo what this call did on hosts new to it, then fail naming them."""

    def activate(host: str, target: dict) -> dict:
        state = transport_for(props, target["runtime"]).activate(host, target["nodes"])
        before = previous.get(host) or {}
        if before.get("original") is not None:
            state["original"] = before["original"]  # the first original stays authoritative across updates
        if not state.get("changed") and before.get("written") is not None:
            state["written"] = before["written"]  # what gcu-stack wrote; a later edit by someone else stays theirs
        return {**state, "runtime": target["runtime"], "nodes": target["nodes"]}

    done, errors = _each(targets, activate)
    if errors:
        undo = {h: s for h, s in done.items() if h not in previous}
        _each(undo, lambda host, state: transport_for(props, state["runtime"]).restore(host, state["nodes"], state))
        raise RuntimeError("could not activate the enflame runtime on: " + "; ".join(f"{h}: {e}" for h, e in sorted(errors.items())))
    return done


def _moved(olds: dict, news: dict, runtime: str) -> bool:
    return any(olds[runtime].get(k) != news[runtime].get(k) for k in LOCATION[runtime])


def _restore(props: dict, hosts: dict) -> None:
    _, errors = _each(hosts, lambda host, state: transport_for(props, state["runtime"]).restore(host, state.get("nodes", []), state))
    if errors:
        raise RuntimeError("could not restore the container runtime's config on: " + "; ".join(f"{h}: {e}" for h, e in sorted(errors.items())))


class ContainerRuntimeProvider(ResourceProvider):
    serialize_as_secret_always = False

    @engine_watched
    def create(self, props: dict) -> CreateResult:
        ensure_cluster(props)
        runtimes, unsupported = node_runtimes(props)
        hosts = _activate_all(props, plan_hosts(props, runtimes), {})
        return CreateResult("container-runtime", _outputs(props, hosts, runtimes, unsupported))

    def read(self, id_: str, props: dict) -> ReadResult:
        props = normalise(props)
        ensure_cluster(props)
        hosts = dict(props.get("hosts") or {})
        seen, errors = _each(hosts, lambda host, state: transport_for(props, state["runtime"]).inspect(host, state.get("nodes", []), state))
        drift = [f"{host}: cannot inspect ({error})" for host, error in sorted(errors.items())]
        for host, report in sorted(seen.items()):
            drift.extend(f"{host}: {d}" for d in report.get("drift") or [])
            hosts[host] = {**hosts[host], "active": bool(report.get("active"))}
        return ReadResult(id_, _outputs(props, hosts, props.get("runtimes") or {}, props.get("unsupported") or {}, drift))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        olds = normalise(olds)
        changed = changed_inputs(olds, news, INPUTS)
        if not changed and olds.get("drift"):
            changed = ["hosts"]
        # A node's runtime is a singleton: every change is an in-place update, never a replacement.
        return bundled_diff(olds, news, changed)

    @engine_watched
    def update(self, _id: str, olds: dict, news: dict) -> UpdateResult:
        olds = normalise(olds)
        ensure_cluster(news)
        runtimes, unsupported = node_runtimes(news)
        targets = plan_hosts(news, runtimes)
        previous = olds.get("hosts") or {}
        leaving = {
            h: s for h, s in previous.items()
            if h not in targets or targets[h]["runtime"] != s["runtime"] or _moved(olds, news, s["runtime"])
        }
        _restore(olds, leaving)
        kept = {h: s for h, s in previous.items() if h not in leaving}
        hosts = _activate_all(news, targets, kept)
        return UpdateResult(_outputs(news, hosts, runtimes, unsupported))

    @engine_watched
    def delete(self, _id: str, props: dict) -> None:
        props = normalise(props)
        ensure_cluster(props)
        _restore(props, props.get("hosts") or {})


class ContainerRuntime(Bundled, module="gcu", name="ContainerRuntime"):
    """Outputs (attributes): hosts (secret: the runtime files' original bytes), runtimes, unsupported, active, message, drift."""

    PROVIDER = ContainerRuntimeProvider
    OUTPUTS = OUTPUTS

    def __init__(self, name: str, inputs: ContainerRuntimeInputs, opts: Optional[pulumi.ResourceOptions] = None):
        # The original files may hold registry credentials (containerd's CRI section): encrypted in state.
        super().__init__(name, inputs, pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["hosts"])))
