"""The new driver's images pulled on every node of a rollout's full path before its first cordon.

A node is unavailable from its cordon until its new driver is Ready; a pull inside that span (a large driver image, a
slow registry) is node-time without jobs. So before the first cordon each of those nodes gets a short pod of the new
revision's images, while it still serves jobs: pinned to the node by nodeName (no scheduler, no resources requested),
tolerating every taint, running `sh -c 'exit 0'`. The kubelet pulls the images as it would for the driver pod, with
the same pull policy and pull secrets, so the driver pod later starts from the node's image store.

An image error the kubelet reports (a wrong tag, no access to the registry) stops the rollout before anything is
cordoned or evicted, naming the node and the kubelet's message. A node that is slow or NotReady is not waited for
beyond the timeout: its driver pod pulls when its turn comes, as it would without this step. The pods are deleted
when the step ends, whatever happened, and by the resource's delete.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Optional

from ..names import PART_OF, PART_OF_LABEL, REVISION_LABEL, label_value

PREPULL_LABEL = "gcu-stack.enflame.com/driver-prepull-of"   # the driver DaemonSet a pre-pull pod pulls for
# The kubelet's reasons for a container that cannot start because of its image (pkg/kubelet/images/types.go).
IMAGE_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                          "RegistryUnavailable", "ErrImageInspect", "ImageInspectError", "SignatureValidationFailed"})
# The kubelet retries a failed pull with a back-off: an error still reported this long is not a registry's hiccup.
IMAGE_ERROR_GRACE_SECONDS = 20.0
POD_NAME_MAX = 253


def pod_name(daemonset: str, revision: str, node: str) -> str:
    """A pre-pull pod's name: one per DaemonSet, revision and node, so a resumed rollout finds its own pods."""
    name = f"{daemonset}-prepull-{revision}-{node}"
    if len(name) <= POD_NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[:POD_NAME_MAX - 11].rstrip('.-')}-{digest}"


def prepull_pod(template: dict, daemonset: str, namespace: str, revision: str, node: str) -> dict:
    """A pod pulling every image of the driver revision's pod `template` on `node`, each container exiting at once."""
    spec = template.get("spec") or {}
    images: list[dict] = []
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if container.get("image") and all(c["image"] != container["image"] for c in images):
            images.append({"image": container["image"], "imagePullPolicy": container.get("imagePullPolicy") or "IfNotPresent"})
    containers = [{"name": f"pull-{i}", "image": c["image"], "imagePullPolicy": c["imagePullPolicy"],
                   "command": ["sh", "-c", "exit 0"]} for i, c in enumerate(images)]
    pod_spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Never",
        "containers": containers,
        "tolerations": [{"operator": "Exists"}],   # a cordoned, tainted or pressured node pulls all the same
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
    }
    if spec.get("imagePullSecrets"):
        pod_spec["imagePullSecrets"] = spec["imagePullSecrets"]
    labels = {PREPULL_LABEL: label_value(daemonset), REVISION_LABEL: revision, PART_OF_LABEL: PART_OF}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(daemonset, revision, node), "namespace": namespace, "labels": labels},
            "spec": pod_spec}


def pull_state(pod: dict) -> tuple[str, str]:
    """("pulled", ""), ("error", the kubelet's reason and message) or ("pulling", what it waits for) for a pre-pull pod."""
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    wanted = len((pod.get("spec") or {}).get("containers") or [])
    errors, waiting = [], []
    for container in statuses:
        state = container.get("state") or {}
        reason = (state.get("waiting") or {}).get("reason") or ""
        if reason in IMAGE_ERRORS:
            message = (state.get("waiting") or {}).get("message") or ""
            errors.append(f"{container.get('image')}: {reason}" + (f" ({message})" if message else ""))
        elif "running" in state or "terminated" in state or (reason and reason not in ("ContainerCreating", "PodInitializing")):
            continue   # started, ended, or failing for another reason than its image: the image is on the node
        else:
            waiting.append(container.get("image") or container.get("name") or "?")
    if errors:
        return "error", "; ".join(errors)
    if statuses and len(statuses) >= wanted and not waiting:
        return "pulled", ""
    if status.get("phase") == "Succeeded":
        return "pulled", ""
    return "pulling", ", ".join(waiting) or status.get("phase") or "not started by the kubelet yet"


class PullFailed(RuntimeError):
    """A node's kubelet could not pull the new driver's images: the rollout stops before any cordon."""


def pull_first(cluster: Any, nodes: list[str], revision: str, timeout: float, log: Callable[[str], None],
               not_ready: Callable[[dict], Optional[str]]) -> list[str]:
    """Pull `revision`'s images on `nodes` (cluster: driver_rollout.Cluster); the nodes where they were pulled. Raises
    PullFailed naming each node whose kubelet reported an image error for IMAGE_ERROR_GRACE_SECONDS."""
    if not nodes:
        return []
    props = cluster.props
    daemonset, namespace = props["daemonSet"], props["namespace"]
    template = cluster.revision_template(revision)
    delete_prepull_pods(cluster)   # an interrupted rollout's, of this or an older revision
    for node in nodes:
        cluster.create_pod(prepull_pod(template, daemonset, namespace, revision, node))
    log(f"pulling the new driver's images on {len(nodes)} node(s) before the first cordon")
    started = cluster.clock()
    deadline = started + timeout
    first_error: dict[str, float] = {}
    try:
        while True:
            seen = cluster.seen(None)
            states = {p["spec"]["nodeName"]: pull_state(p) for p in cluster.prepull_pods(revision)}
            ready = {n["metadata"]["name"]: not_ready(n) is None for n in cluster.nodes(nodes)}
            pulled = [n for n in nodes if states.get(n, ("", ""))[0] == "pulled"]
            now = cluster.clock()
            failing = {n: why for n, (state, why) in states.items() if state == "error" and n in nodes}
            first_error = {n: first_error.get(n, now) for n in failing}   # since when each still-failing node fails
            lasting = {n: why for n, why in failing.items() if now - first_error[n] >= IMAGE_ERROR_GRACE_SECONDS}
            if lasting:
                raise PullFailed(
                    "the new driver's images could not be pulled, so no node was cordoned: "
                    + "; ".join(f"{n}: {why}" for n, why in sorted(lasting.items()))
                    + ". Fix the image (spec.driver repository, image, version, imagePullSecrets) or the node's access "
                    "to the registry, and run `pulumi up` again")
            # A node that is gone or NotReady is not waited for: its turn in the waves says what is wrong with it.
            waiting = [n for n in nodes if n not in pulled and ready.get(n)]
            if not waiting:
                break
            if now > deadline:
                log(f"the new driver's images are still being pulled on {', '.join(waiting)} after {timeout:.0f} s; "
                    "going on: each of those nodes pulls in its own turn")
                break
            cluster.until_changed(None, seen, 1.0)
        log(f"the new driver's images are on {len(pulled)} of {len(nodes)} node(s) "
            f"({cluster.clock() - started:.1f} s)")
        return pulled
    finally:
        delete_prepull_pods(cluster)


def delete_prepull_pods(cluster: Any) -> None:
    """Every pre-pull pod of the rollout's DaemonSet, whatever its revision (the rollout's end, delete)."""
    for pod in cluster.prepull_pods():
        cluster.delete_pod(pod)


def selector(daemonset: str, revision: Optional[str] = None) -> str:
    """The label selector of a DaemonSet's pre-pull pods (of one revision, when given)."""
    return f"{PREPULL_LABEL}={label_value(daemonset)}" + (f",{REVISION_LABEL}={revision}" if revision else "")
