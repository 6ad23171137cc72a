"""Node Feature Discovery: finds the GCU nodes (PCI vendor 1e36) and labels them.

Master and worker run side by side on every node (gcu-operator's layout). Its CRD
and the worker's configuration are files beside this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from ..config import one_setting
from ..manifests import labels, metadata
from ..model import BuildContext, ComponentDef, ContainerDef, Extras, HostMount, RbacDef, ResolvedComponent, WorkloadDef
from ..names import GCU_PRESENT_LABEL
from ..spec import BaseFields
from ..steps.gcu_nodes import GcuNodesOptions

HERE = Path(__file__).resolve().parent
# PCI classes NFD reports: display (03), co-processor (0b40) and processing accelerators
# (12) — the GCU's class. Labelling by vendor alone gives pci-1e36.present.
WORKER_CONFIG = HERE / "nfd-worker.conf"
CRD = HERE / "nfd-crd.yaml"


class NfdSpec(BaseFields):
    master: Optional[BaseFields] = None
    worker: Optional[BaseFields] = None


# NFD reads `gcu-stack:gcuNodes.driverLabel` too: its rule sets that label where the driver is loaded.
NfdSettings = one_setting("NfdSettings", "gcu_nodes", "gcuNodes", GcuNodesOptions)


def crd(object_labels: dict[str, str]) -> dict:
    manifest = yaml.safe_load(CRD.read_text())
    manifest["metadata"] = metadata(manifest["metadata"]["name"], None, object_labels)
    return manifest


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
        crds=[crd(object_labels)],
        custom_resources=[gcu_rule(object_labels, context.settings.gcu_nodes.driver_label)],
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
                    args=("-server=127.0.0.1:8080", "-config=/etc/kubernetes/node-feature-discovery/nfd-worker.conf"),
                    mounts=(
                        HostMount("host-boot", "/boot", "/host-boot"),
                        HostMount("host-os-release", "/etc/os-release", "/host-etc/os-release", type="File"),
                        HostMount("host-sys", "/sys", "/host-sys"),
                        HostMount("host-usr-lib", "/usr/lib", "/host-usr/lib"),
                    ),
                    config_mount="/etc/kubernetes/node-feature-discovery",
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
)
