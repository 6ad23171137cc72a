"""Cluster DNS for the embedded cluster's real nodes: CoreDNS, deployed as kubeadm deploys it.

The CoreDNS binary is built from its Go module (devtools/coredns, by scripts/toolchain/kube.sh) and packed here into
a one-layer image that each real node imports (no registry). In the cluster: the ``kube-dns`` Service on
``10.96.0.10`` (the address every real node's kubelet writes into pods' resolv.conf), the ``coredns`` Deployment
with its ServiceAccount, RBAC and Corefile ConfigMap in kube-system, on real nodes only (simulated nodes run no pod).
Names under ``cluster.local`` resolve; there is no upstream (the machine has no outside DNS to forward to).

    python -m devtools.clusterdns up --kubeconfig K --state-dir NODE_DIR [--state-dir NODE_DIR ...]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from devtools import CACHE_DIR, PROJECT_DIR, TOOLCHAIN_HINT, go_requirement
from devtools.realnode import CLUSTER_DNS_IP, CLUSTER_DOMAIN, KubeApi, RealNode, RealNodeError, one_layer_image_archive

MODULE_DIR = PROJECT_DIR / "devtools" / "coredns"
NAMESPACE = "kube-system"
IMAGE_REPOSITORY = "gcu-stack.local/realnode-coredns"
FIELD_MANAGER = "gcu-stack-devtools"
LABELS = {"k8s-app": "kube-dns"}
# kubeadm's Corefile without `forward` and `loop`: nothing upstream to forward to here.
COREFILE = f""".:53 {{
    errors
    health {{
       lameduck 5s
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }}
    prometheus :9153
    cache 30
    reload
    loadbalance
}}
"""


class ClusterDnsError(RuntimeError):
    pass


def version() -> str:
    """The CoreDNS version devtools/coredns/go.mod requires."""
    found = go_requirement(MODULE_DIR / "go.mod", "github.com/coredns/coredns")
    if not found:
        raise ClusterDnsError(f"no 'require github.com/coredns/coredns vX' in {MODULE_DIR / 'go.mod'}")
    return found


def binary() -> Path:
    path = Path(os.environ.get("GCU_COREDNS_BIN") or CACHE_DIR / f"coredns-{version()}" / "bin" / "coredns")
    if not os.access(path, os.X_OK):
        raise ClusterDnsError(f"no CoreDNS at {path}: {TOOLCHAIN_HINT} (it builds CoreDNS {version()} from devtools/coredns)")
    return path


def image_archive() -> tuple[Path, str]:
    """(docker-save archive, reference) of the CoreDNS image: the static binary as /coredns; cached."""
    data = binary().read_bytes()
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tf:
        for name in ("etc", "etc/coredns"):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tf.addfile(info)
        info = tarfile.TarInfo("coredns")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tf.addfile(info, io.BytesIO(data))
    return one_layer_image_archive(IMAGE_REPOSITORY, layer.getvalue(),
                                   {"Entrypoint": ["/coredns"], "WorkingDir": "/"},
                                   f"gcu-stack realnode CoreDNS {version()} ({hashlib.sha256(data).hexdigest()[:12]})")


def manifests(image: str, replicas: int = 1) -> list[dict]:
    """kubeadm's CoreDNS add-on (v1.33), with a local image and only on real nodes."""
    meta = {"namespace": NAMESPACE}
    pod_spec = {
        "serviceAccountName": "coredns",
        "priorityClassName": "system-cluster-critical",
        "dnsPolicy": "Default",
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        # The simulated (kwok) nodes of the same cluster run no container.
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]}]}},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": LABELS}, "topologyKey": "kubernetes.io/hostname"}}]}},
        "containers": [{
            "name": "coredns", "image": image, "imagePullPolicy": "Never",
            "args": ["-conf", "/etc/coredns/Corefile"],
            "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
            "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
            "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                      {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                      {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
            "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "initialDelaySeconds": 60,
                              "timeoutSeconds": 5, "failureThreshold": 5},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        }],
        "volumes": [{"name": "config-volume", "configMap": {"name": "coredns",
                                                            "items": [{"key": "Corefile", "path": "Corefile"}]}}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **meta}, "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "labels": LABELS, **meta},
         "spec": {"replicas": replicas, "selector": {"matchLabels": LABELS},
                  "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                  "template": {"metadata": {"labels": LABELS}, "spec": pod_spec}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "labels": LABELS, **meta,
                                                             "annotations": {"prometheus.io/port": "9153",
                                                                             "prometheus.io/scrape": "true"}},
         "spec": {"clusterIP": CLUSTER_DNS_IP, "selector": LABELS,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                            {"name": "metrics", "port": 9153, "protocol": "TCP"}]}},
    ]


def _path(obj: Mapping[str, Any]) -> str:
    group_version, kind = obj["apiVersion"], obj["kind"]
    plural = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
              "ConfigMap": "configmaps", "Deployment": "deployments", "Service": "services"}[kind]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    return f"{base}{f'/namespaces/{namespace}' if namespace else ''}/{plural}/{obj['metadata']['name']}"


def apply(api: KubeApi, objects: Iterable[Mapping[str, Any]]) -> None:
    """Server-side apply, as `kubectl apply --server-side` would (idempotent; a second `up` changes nothing)."""
    for obj in objects:
        api.request("PATCH", f"{_path(obj)}?fieldManager={FIELD_MANAGER}&force=true", dict(obj),
                    content_type="application/apply-patch+yaml")


def ready_replicas(api: KubeApi) -> int:
    deployment = api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/coredns")
    return int((deployment.get("status") or {}).get("readyReplicas") or 0)


def up(kubeconfig: Any, nodes: Sequence[RealNode], *, replicas: Optional[int] = None, timeout: float = 120.0) -> dict:
    """Import the CoreDNS image into each node, apply the add-on and wait until a replica is ready.

    Returns what it did (image, replicas, seconds per step) for logs and tests.
    """
    if not nodes:
        raise ClusterDnsError("cluster DNS runs on real nodes: give at least one")
    started = time.monotonic()
    archive, ref = image_archive()
    for node in nodes:
        if ref not in node.images():
            node.import_image(archive, ref)
    imported = time.monotonic() - started
    replicas = replicas or min(2, len(nodes))
    api = KubeApi(kubeconfig)
    try:
        apply(api, manifests(ref, replicas))
        deadline = time.monotonic() + timeout
        while ready_replicas(api) < 1:
            if time.monotonic() > deadline:
                pods = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=k8s-app%3Dkube-dns")
                states = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
                           [c.get("state") for c in p["status"].get("containerStatuses") or []]) for p in pods["items"]]
                raise ClusterDnsError(f"CoreDNS not ready in {timeout:.0f} s; its pods: {states}")
            time.sleep(1)
    finally:
        api.close()
    return {"image": ref, "replicas": replicas, "import-seconds": imported, "seconds": time.monotonic() - started}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.clusterdns", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up", help="deploy CoreDNS onto the given real nodes (idempotent)")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--state-dir", action="append", required=True, help="a running real node's state directory")
    p.add_argument("--replicas", type=int, help="default: 2, or 1 with one node")
    a = parser.parse_args(argv)
    try:
        nodes = [RealNode.from_state_dir(d) for d in a.state_dir]
        done = up(a.kubeconfig, nodes, replicas=a.replicas)
    except (ClusterDnsError, RealNodeError, OSError, ValueError, KeyError) as e:
        print(f"cluster DNS: {e}", file=sys.stderr)
        return 1
    print(f"cluster DNS: CoreDNS {version()} ({done['replicas']} replica(s)) answers on {CLUSTER_DNS_IP} "
          f"for {CLUSTER_DOMAIN} ({done['seconds']:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
