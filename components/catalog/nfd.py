"""Node Feature Discovery: finds the GCU nodes (PCI vendor 1e36) and labels them.

Two layouts, by the version the blueprint asks for (the seed's v0.11.3 the older):
- gRPC (before v0.14): master and worker side by side in one DaemonSet on every node, the worker sending its
  features to its master over gRPC (gcu-operator's layout), with v0.11's NodeFeatureRule CRD;
- NodeFeature (v0.14 on): the worker DaemonSet publishes a NodeFeature object per node, and one master
  (a Deployment) labels the nodes from them and from the NodeFeatureRules, with the NFD API's CRDs.
The same NodeFeatureRule marks GCU nodes in both. CRDs and the worker's configuration are files beside this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from ..config import one_setting
from ..manifests import labels, metadata
from ..model import BuildContext, ComponentDef, ContainerDef, Extras, HostMount, RbacDef, ResolvedComponent, Resources, Variant, WorkloadDef
from ..names import GCU_PRESENT_LABEL
from ..spec import BaseFields
from ..steps.gcu_nodes import GcuNodesOptions
from ..steps.nfd_labels import NFD_LABELS

HERE = Path(__file__).resolve().parent
# PCI classes NFD reports: display (03), co-processor (0b40) and processing accelerators
# (12) — the GCU's class. Labelling by vendor alone gives pci-1e36.present.
WORKER_CONFIG = HERE / "nfd-worker.conf"
CRD = HERE / "nfd-crd.yaml"
API_CRDS = HERE / "nfd-api-crds.yaml"
CONFIG_DIR = "/etc/kubernetes/node-feature-discovery"
GRPC_HEALTH_PORT = 8082  # the NodeFeature layout's probes: a worker serves it once it has published its features
WORKER_MOUNTS = (
    HostMount("host-boot", "/boot", "/host-boot"),
    HostMount("host-os-release", "/etc/os-release", "/host-etc/os-release", type="File"),
    HostMount("host-sys", "/sys", "/host-sys"),
    HostMount("host-usr-lib", "/usr/lib", "/host-usr/lib"),
)


class NfdSpec(BaseFields):
    master: Optional[BaseFields] = None
    worker: Optional[BaseFields] = None


# NFD reads `gcu-stack:gcuNodes.driverLabel` too: its rule sets that label where the driver is loaded.
NfdSettings = one_setting("NfdSettings", "gcu_nodes", "gcuNodes", GcuNodesOptions)


def crd(object_labels: dict[str, str]) -> dict:
    manifest = yaml.safe_load(CRD.read_text())
    manifest["metadata"] = metadata(manifest["metadata"]["name"], None, object_labels)
    return manifest


def api_crds(object_labels: dict[str, str]) -> list[dict]:
    """The NFD API's CRDs, with the stack's labels beside their own annotations."""
    manifests = [m for m in yaml.safe_load_all(API_CRDS.read_text()) if m]
    for manifest in manifests:
        manifest["metadata"] = {**metadata(manifest["metadata"]["name"], None, object_labels),
                                "annotations": dict(manifest["metadata"].get("annotations") or {})}
    return manifests


def gcu_rule(object_labels: dict[str, str], driver_label: str) -> dict:
    """The NodeFeatureRule: new GCU nodes get enflame.com/gcu.present from NFD itself, without another `pulumi up`."""
    group = yaml.safe_load(CRD.read_text())["spec"]["group"]
    driver_key, _, driver_value = driver_label.partition("=")
    driver_rule = {
        # A loaded enflame kernel module marks the driver as installed (the GcuNodes check reads it).
        "name": "enflame gcu driver loaded",
        "labels": {driver_key: driver_value},
        "matchFeatures": [{"feature": "kernel.loadedmodule", "matchExpressions": {"enflame": {"op": "Exists"}}}],
    }
    return {
        "apiVersion": f"{group}/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": metadata("enflame-gcu-present", None, object_labels),
        "spec": {
            "rules": [
                {
                    "name": "enflame gcu present",
                    "labels": {GCU_PRESENT_LABEL: "true"},
                    "matchFeatures": [
                        {"feature": "pci.device", "matchExpressions": {"vendor": {"op": "In", "value": ["1e36"]}}}
                    ],
                },
                *([driver_rule] if driver_key else []),
            ]
        },
    }


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    object_labels = labels(component, context.instance)
    return Extras(
        config_files={"nfd-worker.conf": WORKER_CONFIG.read_text()},
        crds=api_crds(object_labels) if component.variant is not None else [crd(object_labels)],
        custom_resources=[gcu_rule(object_labels, context.settings.gcu_nodes.driver_label)],
    )


GRPC_HEALTH = {"grpc": {"port": GRPC_HEALTH_PORT}, "initialDelaySeconds": 5, "periodSeconds": 10}


def nfd_program(name: str, *args: str, resources: Resources, **more) -> ContainerDef:
    """nfd-master or nfd-worker of the NodeFeature layout: ready once its gRPC health service answers (a worker's
    after it published its node's features), with its metrics port; resources are NFD v0.17's own figures."""
    return ContainerDef(name=name, command=(name,), args=(*args, f"-grpc-health={GRPC_HEALTH_PORT}"),
                        ports=(("metrics", 8081),), readiness=GRPC_HEALTH, resources=resources, **more)


NODE_FEATURE_LAYOUT = Variant(
    since=(0, 14),
    name="NodeFeature",
    workloads=(
        WorkloadDef(
            kind="Deployment",
            part="master",
            default_name="nfd-master",
            # The master holds every node's features.
            containers=(nfd_program("nfd-master", resources=Resources("100m", "128Mi", "300m", "4Gi")),),
        ),
        WorkloadDef(
            part="worker",
            default_name="nfd-worker",
            containers=(
                nfd_program(
                    "nfd-worker", f"-config={CONFIG_DIR}/nfd-worker.conf",
                    resources=Resources("5m", "64Mi", "200m", "512Mi"),
                    # The NodeFeature it publishes is owned by its pod: deleting NFD takes the objects with it.
                    pod_env=(("POD_NAME", "metadata.name"), ("POD_UID", "metadata.uid")),
                    mounts=WORKER_MOUNTS,
                    config_mount=CONFIG_DIR,
                ),
            ),
        ),
    ),
    # NFD v0.17's own roles (deployment/base/rbac), as one account for master and worker.
    rbac=RbacDef(
        rules=(
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["watch", "list"]},
            {"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "list", "patch", "update"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"],
             "verbs": ["get", "list", "watch", "create", "update", "delete"]},
            {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeaturerules", "nodefeaturegroups"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeaturegroups/status"], "verbs": ["patch", "update"]},
        ),
        service_account="nfd-service-account",
        cluster_role="nfd-clusterrole",
        binding="nfd-clusterrolebinding",
    ),
)

NFD = ComponentDef(
    key="nfd",
    type_name="NodeFeatureDiscovery",
    # The seed's field table gives this default; its example blueprint names it explicitly.
    default_name="node-feature-discovery-ds",
    default_image="node-feature-discovery",
    spec_model=NfdSpec,
    gcu_nodes_only=False,  # it must run everywhere: it is what finds the GCU nodes
    workloads=(
        WorkloadDef(
            containers=(
                ContainerDef(
                    name="nfd-master",
                    part="master",
                    command=("nfd-master",),
                    # One master per node, next to its worker (gcu-operator's layout). The
                    # extra namespace lets the GCU rule set enflame.com/gcu.present.
                    args=("-port=8080", "-extra-label-ns=enflame.com", "-featurerules-controller=true"),
                ),
                ContainerDef(
                    name="nfd-worker",
                    part="worker",
                    command=("nfd-worker",),
                    args=("-server=127.0.0.1:8080", f"-config={CONFIG_DIR}/nfd-worker.conf"),
                    mounts=WORKER_MOUNTS,
                    config_mount=CONFIG_DIR,
                ),
            ),
        ),
    ),
    settings=NfdSettings,
    rbac=RbacDef(
        rules=(
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "update"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
            {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeaturerules"], "verbs": ["get", "list", "watch"]},
        ),
        service_account="nfd-service-account",
        cluster_role="nfd-clusterrole",
        binding="nfd-clusterrolebinding",
    ),
    extras=extras,
    layout="gRPC",
    # Both layouts' masters label nodes and leave the labels behind when removed.
    before=NFD_LABELS,
    variants=(NODE_FEATURE_LAYOUT,),
)
