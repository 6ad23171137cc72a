"""Objects particular to one component (CRDs, rules, config), keyed by `ComponentDef.extras`.

Each builder returns `Extras`: ConfigMap files mounted into the workload, and
manifests declared before the workload (CRDs first; custom resources wait for them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import yaml

from .catalog import GCU_PRESENT_LABEL
from .manifests import labels, metadata, selector
from .resolve import ResolvedComponent
from .settings import Options


@dataclass
class Extras:
    config_files: dict[str, str] = field(default_factory=dict)
    crds: list[dict] = field(default_factory=list)
    custom_resources: list[dict] = field(default_factory=list)
    # Environment added to every container of the workload.
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExtraContext:
    instance: str
    options: Options


NFD_GROUP = "nfd.k8s-sigs.io"

# PCI classes NFD reports: display (03), co-processor (0b40) and processing
# accelerators (12) — the GCU's class. Labelling by vendor alone gives pci-1e36.present.
NFD_WORKER_CONFIG = {
    "core": {"sleepInterval": "60s"},
    "sources": {"pci": {"deviceClassWhitelist": ["03", "0b40", "12"], "deviceLabelFields": ["vendor"]}},
}


def _nfd(component: ResolvedComponent, context: ExtraContext) -> Extras:
    object_labels = labels(component, context.instance)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata(f"nodefeaturerules.{NFD_GROUP}", None, object_labels),
        "spec": {
            "group": NFD_GROUP,
            "scope": "Cluster",
            "names": {
                "kind": "NodeFeatureRule",
                "listKind": "NodeFeatureRuleList",
                "plural": "nodefeaturerules",
                "singular": "nodefeaturerule",
                "shortNames": ["nfr"],
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["rules"],
                                    "properties": {
                                        "rules": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "required": ["name"],
                                                "x-kubernetes-preserve-unknown-fields": True,
                                                "properties": {"name": {"type": "string"}},
                                            },
                                        }
                                    },
                                }
                            },
                            "required": ["spec"],
                        }
                    },
                }
            ],
        },
    }
    driver_key, _, driver_value = context.options.gcu_nodes.driver_label.partition("=")
    driver_rule = {
        # A loaded enflame kernel module marks the driver as installed (the GcuNodes check reads it).
        "name": "enflame gcu driver loaded",
        "labels": {driver_key: driver_value},
        "matchFeatures": [{"feature": "kernel.loadedmodule", "matchExpressions": {"enflame": {"op": "Exists"}}}],
    }
    # New GCU nodes get enflame.com/gcu.present from NFD itself, without another `pulumi up`.
    rule = {
        "apiVersion": f"{NFD_GROUP}/v1alpha1",
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
    return Extras(
        config_files={"nfd-worker.conf": yaml.safe_dump(NFD_WORKER_CONFIG, sort_keys=False)},
        crds=[crd],
        custom_resources=[rule],
    )


def _exporter(component: ResolvedComponent, context: ExtraContext) -> Extras:
    if not context.options.exporter_service_monitor:
        return Extras()
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(component.name, component.namespace, labels(component, context.instance)),
        "spec": {
            "selector": {"matchLabels": selector(component)},
            "namespaceSelector": {"matchNames": [component.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
        },
    }
    return Extras(custom_resources=[monitor])


def _toolkit(component: ResolvedComponent, context: ExtraContext) -> Extras:
    # The image's entrypoint (components/hoststate/runtime_host.py) activates the runtime on
    # its node at start, so nodes that join later need no `pulumi up`. Paths are under /host.
    runtime = context.options.docker_runtime
    return Extras(
        env={
            "RUNTIME_ACTIVATION": runtime.mode,
            "ENFLAME_RUNTIME_PATH": runtime.runtime_path,
            "DAEMON_JSON": "/host" + runtime.daemon_json,
            "DOCKER_HOST": "unix:///host" + runtime.docker_host[len("unix://"):],
            "DOCKER_PID_FILE": "/host" + runtime.pid_file,
        }
    )


BUILDERS: dict[str, Callable[[ResolvedComponent, ExtraContext], Extras]] = {
    "nfd": _nfd,
    "exporter": _exporter,
    "toolkit": _toolkit,
}


def extras_for(component: ResolvedComponent, context: ExtraContext) -> Extras:
    key = component.definition.extras
    return BUILDERS[key](component, context) if key else Extras()
