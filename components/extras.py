"""Objects particular to one component (CRDs, rules, config, storage, charts), keyed by `ComponentDef.extras`.

Each builder returns `Extras`: ConfigMap files mounted into the workloads, what
the component adds to its pods, and objects declared before the workloads (CRDs
first; custom resources wait for them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pulumi
import yaml

from .catalog import (
    DEFAULT_PULL_POLICY,
    DEFAULT_REPOSITORY,
    DEFAULT_VERSION,
    EXPORTER_PORT,
    GCU_PRESENT_LABEL,
    NIGHTINGALE_DB_SECRET_KEY,
    HostMount,
)
from .hoststate import runtime_host
from .manifests import PodAdditions, labels, metadata, selector
from .resolve import ResolvedComponent, effective
from .settings import Options


@dataclass
class Extras:
    config_files: dict[str, str] = field(default_factory=dict)
    crds: list[dict] = field(default_factory=list)
    custom_resources: list[dict] = field(default_factory=list)
    # Plain objects the workloads need first (Secrets, PersistentVolumes, claims).
    objects: list[dict] = field(default_factory=list)
    # Helm releases: arguments of pulumi_kubernetes.helm.v3.Release.
    releases: list[dict] = field(default_factory=list)
    pod: PodAdditions = field(default_factory=PodAdditions)


@dataclass(frozen=True)
class ExtraContext:
    instance: str
    options: Options
    # The other deployed components, by spec key (Nightingale scrapes the exporter).
    peers: dict[str, ResolvedComponent] = field(default_factory=dict)
    project_dir: Optional[str] = None


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
    (workload,) = component.workloads
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(component.name, component.namespace, labels(component, context.instance)),
        "spec": {
            "selector": {"matchLabels": selector(workload)},
            "namespaceSelector": {"matchNames": [component.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
        },
    }
    return Extras(custom_resources=[monitor])


def _toolkit(component: ResolvedComponent, context: ExtraContext) -> Extras:
    # The image's entrypoint (components/hoststate/runtime_host.py) activates the runtime on
    # its node at start, so nodes that join later need no `pulumi up`. Paths are under /host.
    runtime = context.options.docker_runtime
    inside = runtime_host.in_container
    directories = runtime_host.host_directories(runtime.daemon_json, runtime.docker_host, runtime.pid_file)
    return Extras(
        pod=PodAdditions(
            env={
                "RUNTIME_ACTIVATION": runtime.mode,
                "ENFLAME_RUNTIME_PATH": runtime.runtime_path,
                "DAEMON_JSON": inside(runtime.daemon_json),
                "DOCKER_HOST": "unix://" + inside(runtime.docker_host[len("unix://"):]),
                "DOCKER_PID_FILE": inside(runtime.pid_file),
            },
            mounts=tuple(
                HostMount(f"docker-host-{i}", d, inside(d), read_only=False, type="DirectoryOrCreate")
                for i, d in enumerate(directories)
            ),
        )
    )


def _gcushare_plugin(component: ResolvedComponent, context: ExtraContext) -> Extras:
    unit = component.spec.memory_unit
    return Extras(
        pod=PodAdditions(
            args=(f"--memory-unit={unit}",),
            env={"MEMORY_UNIT": unit},
            # gcushareNodes: only those nodes share their GCUs; empty means every GCU node.
            node_names=tuple(component.spec.gcushare_nodes),
        )
    )


def _prometheus_config(context: ExtraContext) -> str:
    jobs: list[dict[str, Any]] = [{"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]}]
    exporter = context.peers.get("exporter")
    if exporter is not None:
        (workload,) = exporter.workloads
        target = f"{workload.name}.{exporter.namespace}.svc:{EXPORTER_PORT}"
        jobs.append({"job_name": "gcu-exporter", "metrics_path": "/metrics", "static_configs": [{"targets": [target]}]})
    return yaml.safe_dump({"global": {"scrape_interval": "30s"}, "scrape_configs": jobs}, sort_keys=False)


def _nightingale(component: ResolvedComponent, context: ExtraContext) -> Extras:
    spec = component.spec
    object_labels = labels(component, context.instance)
    names = {w.definition.part: w.name for w in component.workloads}
    pv_name = (spec.mysql_pv.name if spec.mysql_pv and spec.mysql_pv.name else None) or "mysql-pv"
    host_path = (spec.mysql_pv.hostpath if spec.mysql_pv and spec.mysql_pv.hostpath else None) or "/var/lib/enflame/nightingale/mysql"
    claim = (spec.mysql_pvc.name if spec.mysql_pvc and spec.mysql_pvc.name else None) or "mysql-pvc"
    storage = context.options.nightingale_storage
    secret_name = f"{component.name}-db"
    password = context.options.nightingale_db_password
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(secret_name, component.namespace, object_labels),
        "type": "Opaque",
        # From secret stack config; it stays a Pulumi secret all the way into the Secret object.
        "stringData": {NIGHTINGALE_DB_SECRET_KEY: pulumi.Output.secret(password)},
    }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata(pv_name, None, object_labels),
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": host_path, "type": "DirectoryOrCreate"},
        },
    }
    claim_manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(claim, component.namespace, object_labels),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": storage}},
        },
    }
    return Extras(
        config_files={"prometheus.yml": _prometheus_config(context)},
        objects=[secret, volume, claim_manifest],
        pod=PodAdditions(
            env={
                "MYSQL_HOST": names["mysql"],
                "MYSQL_PORT": "3306",
                "REDIS_ADDR": f"{names['redis']}:6379",
                "PROMETHEUS_URL": f"http://{names['prometheus']}:9090",
                "NSERVER_ADDR": f"{names['nserver']}:19000",
            },
            secret_name=secret_name,
            claim_name=claim,
        ),
    )


VOLCANO_PARTS = {"controller": "vc-controller-manager", "admission": "vc-webhook-manager", "scheduler": "vc-scheduler"}


def volcano_images(component: ResolvedComponent) -> dict[str, dict[str, str]]:
    """Per Volcano part: registry, image path, tag and pull policy, by the seed's precedence."""
    spec = component.spec
    images = {}
    for part, default_image in VOLCANO_PARTS.items():
        sub = getattr(spec, part)
        where = f"spec.volcano.{part}"
        repository = effective(spec, sub, "repository", where) or DEFAULT_REPOSITORY
        registry, _, path = repository.partition("/")
        images[part] = {
            "registry": registry,
            "image": "/".join(p for p in (path, effective(spec, sub, "image", where) or default_image) if p),
            "tag": effective(spec, sub, "version", where) or DEFAULT_VERSION,
            "pullPolicy": effective(spec, sub, "image_pull_policy", where) or DEFAULT_PULL_POLICY,
        }
    return images


def _volcano(component: ResolvedComponent, context: ExtraContext) -> Extras:
    chart = context.options.volcano_chart
    images = volcano_images(component)
    first = images["controller"]  # the chart takes one registry, tag and pull policy (checked in checks.py)
    values = {
        "basic": {
            "image_registry": first["registry"],
            "image_tag_version": first["tag"],
            "image_pull_policy": first["pullPolicy"],
            "controller_image_name": images["controller"]["image"],
            "admission_image_name": images["admission"]["image"],
            "scheduler_image_name": images["scheduler"]["image"],
        },
    }
    release: dict[str, Any] = {
        "name": component.name,
        "namespace": component.namespace,
        "values": values,
        "timeout": chart.timeout_seconds,
    }
    if chart.path:
        release["chart"] = chart.resolved_path(context.project_dir)
    else:
        release["chart"] = chart.chart
        release["version"] = chart.version
        release["repository"] = chart.repository
    return Extras(releases=[release])


BUILDERS: dict[str, Callable[[ResolvedComponent, ExtraContext], Extras]] = {
    "nfd": _nfd,
    "exporter": _exporter,
    "toolkit": _toolkit,
    "gcushare_plugin": _gcushare_plugin,
    "nightingale": _nightingale,
    "volcano": _volcano,
}


def extras_for(component: ResolvedComponent, context: ExtraContext) -> Extras:
    key = component.definition.extras
    return BUILDERS[key](component, context) if key else Extras()
