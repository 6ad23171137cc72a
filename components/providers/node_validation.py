"""Post-deploy validation: GCUs are schedulable on a node, and a pod asking for one runs there.

For each GCU node where the device plugin (or the GCU-share plugin) is meant to run:

1. **capacity** — wait (up to `timeout_seconds`) until the node is Ready and advertises the
   plugin's resource (`enflame.com/gcu`, or `enflame.com/gcu-memory`) in `status.allocatable`;
2. **workload** (optional, every node or a sample) — a Job pinned to the node by node affinity
   (so the scheduler must find the GCU: nothing bypasses it) runs one pod that requests one
   unit of the resource, uses the `enflame` runtime and must complete; by default it runs
   `gcu-selfcheck` from the toolkit image, which lists the GCU device files it was given
   and fails if there are none;
3. **cleanup** — the run's Jobs and pods are deleted whatever the outcome (success, failure,
   timeout, an exception). A run that is killed outright leaves Jobs that end by themselves
   (`activeDeadlineSeconds`) and are then removed by Kubernetes (`ttlSecondsAfterFinished`).

`validate_node(api, node, settings)` is the check of one node (the driver upgrade waits
for it before uncordoning a node); `validate_nodes` runs many at once. `GcuValidation`
(pulumi-python:dynamic/gcu:GcuValidation) is the chain step's bundled resource. Like the
other bundled providers it holds no client and reads no globals: every call builds what it
needs from the resource's own properties.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from ..names import DEPLOY_LABEL_PREFIX, GCU_RESOURCE, OPERANDS_LABEL, SELFCHECK, label_value
from ..node.runtime_host import RUNTIME_NAME
from .bundled import Bundled, bundled_diff, changed_inputs, inputs_of
from .cluster import ClusterMismatch, checked_api, list_nodes
from .engine_watch import engine_watched

RUNTIME_CLASS = RUNTIME_NAME
COMPONENT = "validation"
RUN_LABEL = "gcu-stack.enflame.com/validation-run"
NODE_ANNOTATION = "gcu-stack.enflame.com/validation-node"
CONTAINER = "gcu-selfcheck"
# Container states that will not get better by waiting.
HOPELESS = ("InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError")
# Workload outcomes (NodeResult.workload).
PASSED, FAILED, BUSY, NOT_SAMPLED, OFF, NOT_RUN = "passed", "failed", "busy", "not sampled", "off", "not run"
BUSY_SECONDS = 20.0  # how long every GCU may stay taken before the workload is given up as BUSY


@dataclass(frozen=True)
class CheckSettings:
    """How one node is validated; plain data, so another provider can build it from its own inputs."""

    resource: str = GCU_RESOURCE
    # What advertises the resource, for messages ("the device plugin", "the GCU-share device plugin").
    plugin: str = "the device plugin"
    timeout_seconds: float = 120.0
    workload: bool = True
    workload_timeout_seconds: float = 180.0
    image: Optional[str] = None  # None: no workload (nothing to run it with)
    image_pull_policy: str = "IfNotPresent"
    command: tuple[str, ...] = (SELFCHECK,)
    # "" never sets one; docker nodes never get one (docker's default runtime is enflame there).
    runtime_class_name: str = RUNTIME_CLASS
    namespace: str = "kube-system"
    instance: str = "gcu-stack"  # app.kubernetes.io/instance of the validation Jobs
    # Where the plugin's pods are, to say in a failure whether one runs on the node.
    plugin_namespace: Optional[str] = None
    plugin_pod_labels: tuple[tuple[str, str], ...] = ()
    plugin_name: Optional[str] = None
    poll_seconds: float = 1.0
    cleanup_seconds: float = 30.0
    busy_seconds: float = BUSY_SECONDS


@dataclass
class NodeResult:
    node: str
    passed: bool
    capacity_ok: bool = False
    allocatable: Optional[str] = None  # the resource's quantity when the node last qualified
    workload: str = NOT_RUN
    message: str = ""  # why it failed, "<node>: …"; for a pass, a note (e.g. every GCU busy)
    seconds: float = 0.0

    def as_output(self) -> dict:
        return {
            "passed": self.passed,
            "capacity": self.capacity_ok,
            "allocatable": self.allocatable,
            "workload": self.workload,
            "message": self.message,
            "seconds": round(self.seconds, 1),
        }


# ---------------------------------------------------------------------------- pure checks


def _quantity(value: Any) -> Optional[float]:
    from kubernetes.utils.quantity import parse_quantity

    try:
        return float(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError):
        return None


def _ready(node: dict) -> tuple[bool, str]:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return True, ""
            reason = condition.get("reason") or condition.get("status")
            return False, f"node is not Ready ({reason}{': ' + condition['message'] if condition.get('message') else ''})"
    return False, "node is not Ready (no Ready condition)"


def capacity_problem(node: Optional[dict], resource: str) -> Optional[str]:
    """Why `node` cannot take a pod asking for `resource` yet; None when it can."""
    if node is None:
        return "node not found"
    ready, why = _ready(node)
    if not ready:
        return why
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if resource not in allocatable:
        return f"no {resource} in allocatable"
    amount = _quantity(allocatable[resource])
    if not amount or amount <= 0:
        capacity = ((node.get("status") or {}).get("capacity") or {}).get(resource)
        return f"{resource} is {allocatable[resource]} in allocatable (capacity {capacity})"
    return None


def allocatable_of(node: Optional[dict], resource: str) -> Optional[str]:
    return (((node or {}).get("status") or {}).get("allocatable") or {}).get(resource)


def coverage(
    gcu_nodes: list[str],
    live: dict[str, dict],
    plugin_key: str,
    node_selector: Optional[dict],
    node_names: list[str],
    plugin: str = "the device plugin",
) -> tuple[list[str], dict[str, str]]:
    """The GCU nodes where the plugin is meant to run, and why each other GCU node is skipped.

    The plugin's DaemonSet runs where its nodeSelector matches, no opt-out label is "false"
    (`enflame.com/gcu.deploy.<plugin>`, `enflame.com/gcu.deploy.operands`) and, for the
    GCU-share plugin, the node is one of `gcushareNodes` (when any are listed).
    """
    covered, skipped = [], {}
    for name in sorted(set(gcu_nodes)):
        node = live.get(name)
        if node is None:
            skipped[name] = "no longer exists"
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        for key in (DEPLOY_LABEL_PREFIX + plugin_key, OPERANDS_LABEL):
            if labels.get(key) == "false":
                skipped[name] = f"opted out ({key}=false)"
                break
        else:
            if node_names and name not in node_names:
                skipped[name] = f"not one of {plugin}'s nodes"
            elif any(labels.get(k) != v for k, v in (node_selector or {}).items()):
                selector = ",".join(f"{k}={v}" for k, v in sorted((node_selector or {}).items()))
                skipped[name] = f"not selected by {plugin}'s nodeSelector ({selector})"
            else:
                covered.append(name)
    return covered, skipped


def capacity_failure(node: str, problem: str, waited: float, settings: CheckSettings, hint: str = "") -> str:
    """The message of a node that never qualified, e.g.
    `gcu-node-3: no enflame.com/gcu in allocatable after 120 s — is the device plugin running there?`"""
    if problem.startswith("node is not Ready") or problem == "node not found":
        text = f"{node}: {problem} after {waited:.0f} s"
    else:
        text = f"{node}: {problem} after {waited:.0f} s — is {settings.plugin} running there?"
    return f"{text} ({hint})" if hint else text


def _slug(text: str, size: int) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:size].strip("-") or "node"


def job_name(node: str, run: str) -> str:
    digest = hashlib.sha1(f"{run}/{node}".encode()).hexdigest()[:8]
    return f"gcu-validate-{_slug(node, 36)}-{digest}"


def runtime_class_for(node: Optional[dict], settings: CheckSettings) -> Optional[str]:
    """The pod's runtimeClassName on this node: none on docker nodes, whose default runtime the
    toolkit made `enflame` (and whose CRI shim takes no runtime handler); the setting elsewhere."""
    version = (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion") or ""
    if not settings.runtime_class_name or version.startswith("docker://"):
        return None
    return settings.runtime_class_name


def run_labels(settings: CheckSettings, run: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "gcu-validation",
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/part-of": "gcu-stack",
        "app.kubernetes.io/instance": label_value(settings.instance),
        RUN_LABEL: run,
    }


def job_manifest(node: str, settings: CheckSettings, run: str, runtime_class: Optional[str]) -> dict:
    """One Job whose single pod must run on `node` with one unit of the GCU resource and complete."""
    labels = run_labels(settings, run)
    annotations = {NODE_ANNOTATION: node}
    limits = {settings.resource: "1", "cpu": "100m", "memory": "64Mi"}
    pod_spec: dict = {
        "restartPolicy": "Never",
        # Through the scheduler, so "schedulable" is what is checked; matchFields names exactly this node.
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
                }
            }
        },
        # Pinned to one node: whatever taints it carries (a GCU taint, a cordon during a driver upgrade).
        "tolerations": [{"operator": "Exists"}],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": CONTAINER,
                "image": settings.image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": list(settings.command),
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "GCU_RESOURCE", "value": settings.resource},
                ],
                "resources": {"requests": {**limits, "cpu": "10m", "memory": "16Mi"}, "limits": limits},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(node, run), "namespace": settings.namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(settings.workload_timeout_seconds) + 30,
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec},
        },
    }


def _condition(obj: dict, kind: str) -> Optional[dict]:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _container_state(pod: dict, state: str) -> Optional[dict]:
    """The first container's `state.<state>` ("terminated", "waiting") of a pod, if any."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        found = (status.get("state") or {}).get(state)
        if found:
            return found
    return None


def _terminated(pod: dict) -> Optional[dict]:
    return _container_state(pod, "terminated")


def _waiting(pod: dict) -> Optional[dict]:
    return _container_state(pod, "waiting")


def workload_outcome(node: str, job: Optional[dict], pods: list[dict], settings: CheckSettings, waited: float) -> Optional[tuple[str, str]]:
    """(outcome, message) once the workload has an answer; None while it may still complete.

    `waited`: seconds since the Job was created; after `workload_timeout_seconds` an unfinished
    pod is an answer too. A pod the scheduler keeps out only because every unit of the
    resource is taken (`Insufficient enflame.com/gcu`) is BUSY after `busy_seconds`: the node
    advertises its GCUs and the scheduler counts them, other pods hold them.
    """
    expired = waited >= settings.workload_timeout_seconds
    pod = next((p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")), pods[0] if pods else None)
    phase = ((pod or {}).get("status") or {}).get("phase")
    if phase == "Succeeded" or (job is not None and _condition(job, "Complete")):
        return PASSED, ""
    name = ((pod or {}).get("metadata") or {}).get("name") or "?"
    if phase == "Failed":
        state = _terminated(pod) or {}
        code = state.get("exitCode")
        reason = state.get("reason") or ((pod.get("status") or {}).get("reason")) or "Failed"
        detail = state.get("message") or (pod.get("status") or {}).get("message") or ""
        text = f"{node}: the validation pod {name} failed (exit code {code}, {reason})"
        if detail:
            text += f": {detail.strip()}"
        if code in (126, 127) or reason in ("StartError", "ContainerCannotRun"):
            text += f" — does the image have {settings.command[0] if settings.command else 'its command'}? (gcu-stack:validation image/command)"
        return FAILED, text
    if job is not None and _condition(job, "Failed") and pod is None:
        failed = _condition(job, "Failed") or {}
        return FAILED, f"{node}: the validation job failed ({failed.get('reason')}: {failed.get('message')})"
    waiting = _waiting(pod) if pod else None
    if waiting and waiting.get("reason") in HOPELESS:
        return FAILED, f"{node}: the validation pod {name} cannot start ({waiting['reason']}: {waiting.get('message', '').strip()})"
    unscheduled = pod is not None and not (pod.get("spec") or {}).get("nodeName")
    scheduled = next((c for c in ((pod or {}).get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    why = (scheduled or {}).get("message") or "no scheduling decision"
    if unscheduled and f"Insufficient {settings.resource}" in why and waited >= min(settings.busy_seconds, settings.workload_timeout_seconds):
        return BUSY, f"{node}: every {settings.resource} is in use by other pods, the workload was not run"
    if not expired:
        return None
    if pod is None:
        return FAILED, f"{node}: no validation pod was created in {waited:.0f} s"
    if unscheduled:
        return FAILED, f"{node}: the validation pod was not scheduled in {waited:.0f} s: {why}"
    if waiting:
        return FAILED, f"{node}: the validation pod {name} did not start in {waited:.0f} s ({waiting.get('reason')}: {waiting.get('message', '').strip()})"
    if phase == "Pending":
        return FAILED, f"{node}: the validation pod {name} did not start in {waited:.0f} s (still Pending on the node)"
    return FAILED, f"{node}: the validation pod {name} did not finish in {waited:.0f} s"


# ---------------------------------------------------------------------------- the cluster


def _plain(response: Any) -> dict:
    return json.loads(response.data)


def _clients(api: Any) -> tuple[Any, Any]:
    from kubernetes import client

    return client.BatchV1Api(api.api_client), client.NodeV1Api(api.api_client)


def _api_message(error: Exception) -> str:
    try:
        return json.loads(getattr(error, "body", None) or "{}").get("message") or str(error)
    except (ValueError, AttributeError):
        return str(error)


def read_nodes(api: Any, names: list[str], page_size: int = 500) -> dict[str, dict]:
    """The named nodes as plain dicts (missing ones absent): one read each for a few, a paged list for many."""
    from kubernetes.client.exceptions import ApiException

    found: dict[str, dict] = {}
    if len(names) <= 3:
        for name in names:
            try:
                found[name] = _plain(api.read_node(name, _preload_content=False))
            except ApiException as error:
                if error.status != 404:
                    raise
        return found
    wanted = set(names)
    return {node["metadata"]["name"]: node for node in list_nodes(api, page_size) if node["metadata"]["name"] in wanted}


def list_all_nodes(api: Any, page_size: int = 500) -> dict[str, dict]:
    return {node["metadata"]["name"]: node for node in list_nodes(api, page_size)}


def plugin_hint(api: Any, node: str, settings: CheckSettings) -> str:
    """Whether the plugin has a pod on the node, for a failure message; "" when that cannot be told."""
    if not settings.plugin_namespace or not settings.plugin_pod_labels:
        return ""
    selector = ",".join(f"{k}={v}" for k, v in settings.plugin_pod_labels)
    try:
        pods = _plain(
            api.list_namespaced_pod(
                settings.plugin_namespace, label_selector=selector, field_selector=f"spec.nodeName={node}", _preload_content=False
            )
        ).get("items") or []
    except Exception:  # noqa: BLE001 - a hint, never the reason a validation fails
        return ""
    name = settings.plugin_name or "plugin"
    if not pods:
        return f"no {name} pod on {node}"
    pod = pods[0]
    phase = (pod.get("status") or {}).get("phase")
    ready = _condition(pod, "Ready") is not None
    return f"its pod {pod['metadata']['name']} is {phase}{' and Ready: see its log' if ready else ', not Ready'}"


def _job_events(api: Any, namespace: str, job: str) -> str:
    try:
        events = _plain(
            api.list_namespaced_event(namespace, field_selector=f"involvedObject.name={job}", _preload_content=False)
        ).get("items") or []
    except Exception:  # noqa: BLE001 - only to explain a failure
        return ""
    warnings = [e for e in events if e.get("type") == "Warning"]
    return (warnings[-1].get("message") or "").strip() if warnings else ""


def _log_tail(api: Any, namespace: str, pod: str) -> str:
    try:
        text = api.read_namespaced_pod_log(pod, namespace, container=CONTAINER, tail_lines=5, _preload_content=False).data
        return text.decode(errors="replace").strip() if isinstance(text, bytes) else str(text).strip()
    except Exception:  # noqa: BLE001 - no log (a simulated node, a pod that never started)
        return ""


def cleanup(api: Any, namespace: str, selector: str, wait_seconds: float = 30.0, sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Delete the Jobs and pods matching `selector` and wait until they are gone; returns what is left."""
    from kubernetes.client.exceptions import ApiException

    batch, _ = _clients(api)
    try:
        batch.delete_collection_namespaced_job(namespace, label_selector=selector, propagation_policy="Background", _preload_content=False)
    except ApiException as error:
        if error.status != 404:
            raise
    deadline = time.monotonic() + wait_seconds
    while True:
        # Finished pods have nothing left to stop: removed at once (grace 0).
        try:
            api.delete_collection_namespaced_pod(namespace, label_selector=selector, grace_period_seconds=0, _preload_content=False)
        except ApiException as error:
            if error.status != 404:
                raise
        left = [p["metadata"]["name"] for p in _plain(api.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)).get("items") or []]
        jobs = _plain(batch.list_namespaced_job(namespace, label_selector=selector, _preload_content=False))
        left += [j["metadata"]["name"] for j in jobs.get("items") or []]
        if not left or time.monotonic() >= deadline:
            return left
        sleep(0.5)


def sweep(api: Any, namespace: str, instance: str) -> list[str]:
    """Every validation Job and pod of this instance (a run killed before its own cleanup)."""
    selector = f"app.kubernetes.io/component={COMPONENT},app.kubernetes.io/instance={label_value(instance)}"
    return cleanup(api, namespace, selector)


@dataclass
class _Node:
    name: str
    sampled: bool
    state: str = "capacity"  # capacity -> queued -> running -> done
    allocatable: Optional[str] = None
    job: Optional[str] = None
    job_started: float = 0.0
    result: Optional[NodeResult] = None


def validate_nodes(
    api: Any,
    nodes: list[str],
    settings: CheckSettings,
    *,
    sample: int = 0,
    parallel: int = 10,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[NodeResult]:
    """Validate `nodes` (CoreV1Api `api`): capacity on every node, the workload on all (`sample` 0) or
    on `sample` of them chosen at random, at most `parallel` workloads at once. Results in node order.

    The run's Jobs and pods are deleted before this returns or raises.
    """
    start = clock()
    names = sorted(set(nodes))
    chosen = set(names) if not sample or sample >= len(names) else set(random.sample(names, sample))
    work = {n: _Node(n, sampled=n in chosen) for n in names}
    run = uuid.uuid4().hex[:10]
    run_workload = settings.workload and bool(settings.image)
    batch, node_api = _clients(api)
    runtime_classes: dict[str, bool] = {}
    live: dict[str, dict] = {}
    try:
        while True:
            now = clock()
            waiting = [w for w in work.values() if w.state == "capacity"]
            if waiting:
                live.update(read_nodes(api, [w.name for w in waiting]))
                for w in waiting:
                    node = live.get(w.name)
                    problem = capacity_problem(node, settings.resource)
                    if problem is None:
                        w.allocatable = allocatable_of(node, settings.resource)
                        if run_workload and w.sampled:
                            w.state = "queued"
                        else:
                            outcome = OFF if not run_workload else NOT_SAMPLED
                            w.state, w.result = "done", NodeResult(w.name, True, True, w.allocatable, outcome, "", now - start)
                    elif now - start >= settings.timeout_seconds:
                        hint = plugin_hint(api, w.name, settings) if problem.startswith(("no ", settings.resource)) else ""
                        message = capacity_failure(w.name, problem, settings.timeout_seconds, settings, hint)
                        w.state, w.result = "done", NodeResult(w.name, False, False, allocatable_of(node, settings.resource), NOT_RUN, message, now - start)
            running = [w for w in work.values() if w.state == "running"]
            for w in [w for w in work.values() if w.state == "queued"][: max(0, parallel - len(running))]:
                _start_job(api, batch, node_api, w, live.get(w.name), settings, run, runtime_classes, clock, start)
            running = [w for w in work.values() if w.state == "running"]
            if running:
                _poll_jobs(api, batch, running, settings, run, clock, start)
            if all(w.state == "done" for w in work.values()):
                return [work[n].result for n in names]
            sleep(settings.poll_seconds)
    finally:
        # Whatever happened (a failure, a timeout, an exception, an interrupt): nothing of this run stays.
        if any(w.job for w in work.values()):
            cleanup(api, settings.namespace, f"{RUN_LABEL}={run}", settings.cleanup_seconds, sleep)


def _start_job(api, batch, node_api, w: _Node, node: Optional[dict], settings: CheckSettings, run: str, runtime_classes: dict, clock, start: float) -> None:
    from kubernetes.client.exceptions import ApiException

    runtime_class = runtime_class_for(node, settings)
    if runtime_class is not None:
        if runtime_class not in runtime_classes:
            try:
                node_api.read_runtime_class(runtime_class, _preload_content=False)
                runtime_classes[runtime_class] = True
            except ApiException as error:
                if error.status not in (401, 403, 404):
                    raise
                # Not allowed to read RuntimeClasses: the pod's admission will say whether it exists.
                runtime_classes[runtime_class] = error.status != 404
        if not runtime_classes[runtime_class]:
            version = (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion") or "unknown runtime"
            message = (
                f"{w.name}: RuntimeClass {runtime_class} does not exist, so no pod can use the enflame runtime on this "
                f"{version} node (is the toolkit deployed? or set gcu-stack:validation runtimeClassName to \"\")"
            )
            w.state, w.result = "done", NodeResult(w.name, False, True, w.allocatable, FAILED, message, clock() - start)
            return
    manifest = job_manifest(w.name, settings, run, runtime_class)
    w.job = manifest["metadata"]["name"]  # before the call: cleanup covers a Job created by a call that then failed
    try:
        batch.create_namespaced_job(settings.namespace, manifest, _preload_content=False)
    except ApiException as error:
        if error.status in (None, 401) or error.status >= 500:
            raise
        # Refused for this Job (a quota, an admission policy, a missing namespace): that node's answer.
        message = f"{w.name}: the validation Job was refused ({error.status}): {_api_message(error)}"
        w.state, w.result = "done", NodeResult(w.name, False, True, w.allocatable, FAILED, message, clock() - start)
        return
    w.state, w.job_started = "running", clock()


def _poll_jobs(api, batch, running: list[_Node], settings: CheckSettings, run: str, clock, start: float) -> None:
    selector = f"{RUN_LABEL}={run}"
    listed = _plain(batch.list_namespaced_job(settings.namespace, label_selector=selector, _preload_content=False))
    jobs = {j["metadata"]["name"]: j for j in listed.get("items") or []}
    pods: dict[str, list[dict]] = {}
    for pod in _plain(api.list_namespaced_pod(settings.namespace, label_selector=selector, _preload_content=False)).get("items") or []:
        owner = ((pod["metadata"].get("labels") or {}).get("job-name")) or ""
        pods.setdefault(owner, []).append(pod)
    now = clock()
    for w in running:
        waited = now - w.job_started
        answer = workload_outcome(w.name, jobs.get(w.job), pods.get(w.job, []), settings, waited)
        if answer is None:
            continue
        outcome, message = answer
        if outcome == FAILED:
            failed = next((p for p in pods.get(w.job, []) if (p.get("status") or {}).get("phase") == "Failed"), None)
            extra = _log_tail(api, settings.namespace, failed["metadata"]["name"]) if failed else _job_events(api, settings.namespace, w.job)
            if extra:
                message += f"; {'log' if failed else 'job'}: {' | '.join(extra.splitlines()[-3:])}"
        w.state = "done"
        w.result = NodeResult(w.name, outcome != FAILED, True, w.allocatable, outcome, message, now - start)


def validate_node(api: Any, node: str, settings: CheckSettings, **kwargs: Any) -> NodeResult:
    """Validate one node: its capacity, then (when `settings.workload` and an image) the workload pod.

    `api` is a CoreV1Api (`components.providers.cluster.core_api`); nothing is left behind.
    """
    return validate_nodes(api, [node], settings, **kwargs)[0]


# ---------------------------------------------------------------------------- the bundled resource


@dataclass
class GcuValidationInputs:
    """Every input of a GcuValidation resource, under its property name."""

    nodes: Any  # the GCU node names (an Output of GcuNodes)
    plugin: str  # spec key of the plugin that advertises the resource (devicePlugin, gcusharePlugin)
    pluginName: str  # its workload's name, whose pods carry app.kubernetes.io/name=<pluginName>
    pluginNamespace: str
    resource: str
    nodeSelector: dict = field(default_factory=dict)  # the plugin's nodeSelector
    nodeNames: list = field(default_factory=list)  # gcushareNodes
    enabled: bool = True
    mode: str = "fail"  # fail | warn
    timeoutSeconds: int = 120
    workload: bool = True
    sampleSize: int = 0
    parallel: int = 10
    workloadTimeoutSeconds: int = 180
    image: Any = None
    imagePullPolicy: str = "IfNotPresent"
    command: list = field(default_factory=lambda: [SELFCHECK])
    runtimeClassName: str = RUNTIME_CLASS
    namespace: str = "kube-system"
    instance: str = "gcu-stack"
    # What was validated (the driver, toolkit and plugin images and specs): a change validates again.
    revision: Any = field(default_factory=dict)
    trigger: str = ""  # any new value validates again
    kubeconfig: Any = None
    context: Optional[str] = None
    clusterUid: Any = None  # the stack's cluster (ClusterGuard's kube-system UID): any other is refused


VALIDATION_INPUTS = tuple(f.name for f in fields(GcuValidationInputs))
VALIDATION_OUTPUTS = ("passed", "results", "skipped", "failures", "validatedAt", "drift")
PLUGIN_WORDS = {"gcusharePlugin": "the GCU-share device plugin"}


def plugin_words(plugin: str) -> str:
    return PLUGIN_WORDS.get(plugin, "the device plugin")


def check_settings(props: dict) -> CheckSettings:
    """A CheckSettings from GcuValidation properties."""
    return CheckSettings(
        resource=props["resource"],
        plugin=plugin_words(props.get("plugin") or ""),
        timeout_seconds=float(props.get("timeoutSeconds") or 120),
        workload=bool(props.get("workload")),
        workload_timeout_seconds=float(props.get("workloadTimeoutSeconds") or 180),
        image=props.get("image") or None,
        image_pull_policy=props.get("imagePullPolicy") or "IfNotPresent",
        command=tuple(props.get("command") or (SELFCHECK,)),
        runtime_class_name=props.get("runtimeClassName") or "",
        namespace=props.get("namespace") or "kube-system",
        instance=props.get("instance") or "gcu-stack",
        plugin_namespace=props.get("pluginNamespace"),
        plugin_pod_labels=(("app.kubernetes.io/name", props["pluginName"]),) if props.get("pluginName") else (),
        plugin_name=props.get("pluginName"),
    )


def _inputs(props: dict) -> dict:
    return inputs_of(props, VALIDATION_INPUTS)


def _covered(props: dict, live: dict[str, dict]) -> tuple[list[str], dict[str, str]]:
    return coverage(
        list(props.get("nodes") or []), live, props.get("plugin") or "", props.get("nodeSelector") or {},
        list(props.get("nodeNames") or []), plugin_words(props.get("plugin") or ""),
    )


def summary(failures: list[str], total: int, mode: str) -> str:
    lines = [f"GCU validation failed on {len(failures)} of {total} node(s):", *(f"  {f}" for f in failures)]
    if mode == "fail":
        lines.append(
            "The validation pods were removed. Fix the node(s) and run `pulumi up` again, or set "
            "gcu-stack:validation mode to warn to accept nodes that are expected to be down."
        )
    return "\n".join(lines)


class ValidationFailed(Exception):
    pass


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_validation(props: dict) -> dict:
    """Validate every covered node; the resource's outputs. Raises ValidationFailed in fail mode."""
    if not props.get("enabled", True):
        return {**_inputs(props), "passed": True, "results": {}, "skipped": {}, "failures": [], "validatedAt": None, "drift": []}
    api = checked_api(props)
    covered, skipped = _covered(props, list_all_nodes(api))
    results = validate_nodes(
        api, covered, check_settings(props), sample=int(props.get("sampleSize") or 0), parallel=int(props.get("parallel") or 10)
    )
    failures = [r.message for r in results if not r.passed]
    if failures and props.get("mode", "fail") == "fail":
        raise ValidationFailed(summary(failures, len(results), "fail"))
    return {
        **_inputs(props),
        "passed": not failures,
        "results": {r.node: r.as_output() for r in results},
        "skipped": skipped,
        "failures": failures,
        "validatedAt": _now(),
        "drift": [],
    }


def drift_of(props: dict, live: dict[str, dict]) -> tuple[list[str], dict]:
    """How the live nodes differ from the recorded results (capacity only: no pod is run), and the
    recorded per-node results with what the live nodes now show."""
    resource = props.get("resource") or GCU_RESOURCE
    recorded = dict(props.get("results") or {})
    covered, _ = _covered(props, live)
    drift, results = [], dict(recorded)
    for name in covered:
        problem = capacity_problem(live.get(name), resource)
        if name not in recorded:
            drift.append(f"{name}: not validated yet")
            continue
        was = bool((recorded[name] or {}).get("capacity"))
        if was and problem:
            drift.append(f"{name}: {problem} (it passed validation at {props.get('validatedAt')})")
            results[name] = {**recorded[name], "passed": False, "capacity": False, "message": f"{name}: {problem} (seen by refresh)"}
        elif not was and not problem:
            drift.append(f"{name}: now advertises {resource} ({allocatable_of(live.get(name), resource)})")
    for name in recorded:
        if name not in covered:
            drift.append(f"{name}: no longer a node the plugin runs on")
    return drift, results


class GcuValidationProvider(ResourceProvider):
    serialize_as_secret_always = False

    @engine_watched
    def create(self, props: dict) -> CreateResult:
        return CreateResult("gcu-validation", run_validation(props))

    def read(self, id_: str, props: dict) -> ReadResult:
        # `pulumi refresh`: the nodes' capacity as it is now, without running any pod.
        if not props.get("enabled", True):
            return ReadResult(id_, props)
        api = checked_api(props)
        drift, results = drift_of(props, list_all_nodes(api))
        failures = [v.get("message") for v in results.values() if not v.get("passed")]
        return ReadResult(id_, {**props, "results": results, "passed": not failures, "failures": failures, "drift": drift})

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        changed = changed_inputs(olds, news, VALIDATION_INPUTS)
        if not changed and news.get("enabled", True):
            if olds.get("drift") or (news.get("mode") == "fail" and not olds.get("passed")):
                changed = ["nodes"]
            else:
                try:
                    # A node that lost (or gained) its GCUs since the last validation: validate again.
                    api = checked_api(news)
                    if drift_of({**olds, **_inputs(news)}, list_all_nodes(api))[0]:
                        changed = ["nodes"]
                except ClusterMismatch:
                    raise
                except Exception:  # noqa: BLE001 - a preview that cannot read the cluster diffs on inputs only
                    pass
        return bundled_diff(olds, news, changed)

    @engine_watched
    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(run_validation(news))

    def delete(self, _id: str, props: dict) -> None:
        # Only a run killed outright leaves Jobs (and they expire by themselves): remove them now.
        try:
            sweep(checked_api(props), props.get("namespace") or "kube-system", props.get("instance") or "gcu-stack")
        except ClusterMismatch:
            raise
        except Exception:  # noqa: BLE001 - nothing persistent is at stake; never block a destroy
            pass


class GcuValidation(Bundled, module="gcu", name="GcuValidation"):
    """Outputs (attributes): passed, results (per node), skipped, failures, validatedAt, drift."""

    PROVIDER, OUTPUTS = GcuValidationProvider, VALIDATION_OUTPUTS
