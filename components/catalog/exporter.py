"""The GCU Prometheus exporter: metrics on node port 30940 at /metrics (gcu-operator's port)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..manifests import labels, metadata, selector
from ..model import BuildContext, ComponentDef, ContainerDef, Extras, ImageDef, NodePort, ResolvedComponent, Resources, ServiceDef
from .common import DEV, SYS, TOPSCLOUD_HINT, one

PORT = 9400
NODE_PORT = 30940


class ExporterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Also declare a Prometheus-Operator ServiceMonitor for the exporter's Service.
    service_monitor: bool = Field(False, alias="exporterServiceMonitor")


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    if not context.settings.service_monitor:
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


EXPORTER = ComponentDef(
    key="exporter",
    type_name="Exporter",
    default_name="enflame-gcu-exporter",
    default_image="gcu-exporter",
    after=("devicePlugin", "gcusharePlugin"),
    uses_device=True,  # paused on a node while its driver is replaced
    workloads=one(
        ContainerDef(
            name="gcu-exporter",
            args=(f"--port={PORT}", "--path=/metrics"),
            ports=(("metrics", PORT),),
            mounts=(DEV, SYS),
            resources=Resources("20m", "64Mi", "500m", "256Mi"),
        ),
        service=ServiceDef("metrics", PORT, node_port=NodePort(NODE_PORT), metrics_path="/metrics"),
    ),
    settings=ExporterSettings,
    extras=extras,
    image=ImageDef(package="gcu-exporter_*.tar.gz", source=TOPSCLOUD_HINT, binary="gcu-exporter"),
)
