"""Helpers for tests that run pods on a real node (devtools/realnode.py).

The node and the cluster are real; these only shorten what tests say: apply an object,
wait for a pod to finish (with the kubelet's log in the error when it does not), render
the project's own device-plugin DaemonSet (components.manifests, exactly what the stack
declares) with the image built around the stand-in plugin.
"""

from __future__ import annotations

import fcntl
import json
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from devtools import log_tail

GCU_RESOURCE = "enflame.com/gcu"
# What a pod runs to read the API server's /version through the `kubernetes` Service, as in-cluster clients do (its
# service account's token and CA). Not busybox wget: its own TLS offers only SHA-1 signatures in TLS 1.2, which API
# servers built with Go >= 1.25 refuse (Kubernetes 1.37: "TLS error from peer (alert code 40)").
IN_CLUSTER_VERSION = "kubectl get --raw /version"


@contextmanager
def real_node_machine_lock(*, shared: bool = False) -> Iterator[None]:
    """The machine's real-node lock, for test modules with real nodes under parallel workers (scripts/test.sh).
    Nodes keep to themselves (their network, mounts, /dev, /usr/local/enflame), so modules that only use their own
    node hold it `shared` and run side by side; a module that compares the machine before and after (its links,
    /run/netns) holds it exclusively. What touches none of that (a control plane, a private dockerd, image builds)
    is better done before taking it."""
    lock_path = Path(tempfile.gettempdir()) / "gcu-stack-real-nodes.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def wait_until(check: Callable[[], Any], timeout: float, what: str, *, interval: float = 0.5,
               diagnose: Optional[Callable[[], str]] = None) -> Any:
    """check() until it returns something truthy; on timeout AssertionError naming `what` (+ diagnose())."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # the API server or the node may be busy for a moment
            last_error = e
        if time.monotonic() > deadline:
            detail = f"\nlast error: {last_error}" if last_error else ""
            if diagnose is not None:
                try:
                    detail += "\n" + diagnose()
                except Exception as e:
                    detail += f"\n(diagnosis failed: {e})"
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def apply(cluster, obj: Mapping) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def get(cluster, kind: str, name: str, namespace: Optional[str] = None) -> Optional[dict]:
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    r = cluster.kubectl(*args, check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def failed_scheduling(cluster, name: str, namespace: str = "default") -> Optional[str]:
    """The messages of the scheduler's FailedScheduling events for a pod, joined; None while there is none."""
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                                        f"involvedObject.name={name},reason=FailedScheduling", "-o", "json").stdout)
    return " ".join(e.get("message", "") for e in events["items"]) or None


def component_pod(cluster, key: str) -> dict:
    """The first pod of a stack component (its app.kubernetes.io/component label), in any namespace; {} if none."""
    pods = json.loads(cluster.kubectl("get", "pods", "-A", "-l", f"app.kubernetes.io/component={key}",
                                      "-o", "json").stdout)["items"]
    return pods[0] if pods else {}


def diagnose_pod(cluster, node, namespace: str, name: str) -> Callable[[], str]:
    def run() -> str:
        pod = get(cluster, "pod", name, namespace) or {}
        events = cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                                 f"involvedObject.name={name}", check=False).stdout
        return (f"pod {namespace}/{name} status: {json.dumps(pod.get('status'), indent=1)[:3000]}\n"
                f"events:\n{events}\n--- kubelet log tail ({node.log_dir / 'kubelet.log'}) ---\n"
                f"{log_tail(node.log_dir / 'kubelet.log', 30)}")
    return run


def wait_pod_phase(cluster, node, namespace: str, name: str, phases: Sequence[str] = ("Succeeded",),
                   timeout: float = 120) -> dict:
    """Wait until the pod reaches one of `phases`; fails early (with details) when it Failed unexpectedly."""
    def check() -> Optional[dict]:
        pod = get(cluster, "pod", name, namespace)
        phase = ((pod or {}).get("status") or {}).get("phase")
        if phase == "Failed" and "Failed" not in phases:
            raise AssertionError(f"pod {namespace}/{name} Failed:\n{diagnose_pod(cluster, node, namespace, name)()}")
        return pod if phase in phases else None

    return wait_until(check, timeout, f"pod {namespace}/{name} to be {'/'.join(phases)} on {node.name}",
                      diagnose=diagnose_pod(cluster, node, namespace, name))


def kubectl_image(node, kubectl: str) -> str:
    """An image of busybox and `kubectl` (a static Go binary, the cluster's own), imported into `node`."""
    import hashlib
    import io
    import tarfile

    from devtools.dockerd import busybox_rootfs_tar
    from devtools.realnode import one_layer_image_archive

    layer = io.BytesIO(busybox_rootfs_tar(node.toolchain["busybox"]).read_bytes())
    data = Path(kubectl).read_bytes()
    with tarfile.open(fileobj=layer, mode="a") as tf:
        info = tarfile.TarInfo("usr/local/bin/kubectl")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tf.addfile(info, io.BytesIO(data))
    archive, ref = one_layer_image_archive("gcu-stack.local/realnode-kubectl", layer.getvalue(),
                                           {"Entrypoint": ["/bin/sh"], "Env": ["PATH=/usr/local/bin:/bin:/usr/bin"]},
                                           f"busybox + kubectl {hashlib.sha256(data).hexdigest()[:12]}")
    node.import_image(archive, ref)
    return ref


def shell_pod(name: str, image: str, script: str, *, namespace: str = "default", host_network: bool = False,
              node_name: Optional[str] = None, limits: Optional[Mapping[str, str]] = None,
              restart: str = "Never") -> dict:
    """A pod running `sh -c script` from a local image (imagePullPolicy Never)."""
    container: dict = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script]}
    if limits:
        container["resources"] = {"limits": dict(limits)}
    spec: dict = {"restartPolicy": restart, "containers": [container], "terminationGracePeriodSeconds": 1}
    if host_network:
        spec["hostNetwork"] = True
    if node_name:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def device_plugin_daemonset(image: str, *, pull_policy: str = "Never", env: Optional[Mapping[str, str]] = None,
                            instance: str = "realnode-test") -> dict:
    """The project's devicePlugin DaemonSet (components.manifests), for `image` (repository/name:tag)."""
    from components import catalog, manifests
    from components.resolve import resolve
    from components.spec import BaseFields

    repository, _, rest = image.rpartition("/")
    name, _, tag = rest.partition(":")
    spec = {"repository": repository, "image": name, "version": tag or "latest", "imagePullPolicy": pull_policy}
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    component = resolve(catalog.DEVICE_PLUGIN, BaseFields.model_validate(spec), "spec.devicePlugin")
    (workload,) = component.workloads
    return manifests.workload_manifest(component, workload, instance, manifests.PodAdditions())


def allocatable_gcus(node) -> int:
    return int((node.allocatable() or {}).get(GCU_RESOURCE, "0"))
