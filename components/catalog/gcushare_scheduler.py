"""The GCU-share scheduler extender: kube-scheduler asks it where GCU-share pods fit.

kube-scheduler runs on the host network of a control-plane node, so the extender is
reached through a node port; the stack exports the URL and a KubeSchedulerConfiguration.
"""

from __future__ import annotations

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ..model import ComponentDef, ContainerDef, ImageDef, NodePort, RbacDef, ResolvedComponent, ServiceDef, WorkloadDef
from ..names import GCUSHARE_RESOURCE
from .common import TOPSCLOUD_HINT, tcp_ready

PORT = 32766
NODE_PORT = NodePort(32766, setting="gcushareSchedulerNodePort")
FILTER_VERB = "filter"
BIND_VERB = "bind"


class SchedulerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_port: int = Field(NODE_PORT.default, alias=NODE_PORT.setting, ge=30000, le=32767)


def extender_url(node_port: int) -> str:
    # kube-scheduler runs on the host network of a control-plane node: the node port is local there.
    return f"http://127.0.0.1:{node_port}/gcushare-scheduler"


def scheduler_configuration(node_port: int) -> str:
    """A KubeSchedulerConfiguration with the extender, for `kube-scheduler --config`."""
    document = {
        # v1 (GA since Kubernetes 1.25): the betas are gone from every kube-scheduler still supported.
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": "/etc/kubernetes/scheduler.conf"},
        "extenders": [
            {
                "urlPrefix": extender_url(node_port),
                "filterVerb": FILTER_VERB,
                "bindVerb": BIND_VERB,
                "enableHTTPS": False,
                "nodeCacheCapable": True,
                "ignorable": False,
                "managedResources": [{"name": GCUSHARE_RESOURCE, "ignoredByScheduler": False}],
            }
        ],
    }
    return yaml.safe_dump(document, sort_keys=False)


def outputs(component: ResolvedComponent, settings: SchedulerSettings) -> dict:
    (workload,) = component.workloads
    return {
        "gcushareSchedulerExtender": {
            "url": extender_url(settings.node_port),
            "service": f"{workload.name}.{component.namespace}",
            "schedulerConfiguration": scheduler_configuration(settings.node_port),
        }
    }


GCUSHARE_SCHEDULER = ComponentDef(
    key="gcushareScheduler",
    type_name="GcuShareSchedulerExtender",
    default_name="gcushare-scheduler-extender",
    default_image="gcushare-scheduler-extender",
    after=("gcusharePlugin",),
    gcu_nodes_only=False,  # a control-plane helper, not a node agent
    workloads=(
        WorkloadDef(
            kind="Deployment",
            containers=(
                ContainerDef(
                    name="gcushare-scheduler-extender",
                    args=(f"--port={PORT}",),
                    ports=(("http", PORT),),
                    readiness=tcp_ready(PORT),
                    restricted=True,
                ),
            ),
            service=ServiceDef("http", PORT, node_port=NODE_PORT),
        ),
    ),
    # Least privilege for filter + bind: read nodes and pods, annotate pods, bind them, report events.
    rbac=RbacDef(
        rules=(
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        )
    ),
    settings=SchedulerSettings,
    outputs=outputs,
    image=ImageDef(
        package="gcushare-scheduler-extender_*.tar.gz",
        source=TOPSCLOUD_HINT,
        binary="gcushare-scheduler-extender",
        # A control-plane Deployment under Pod Security "restricted": non-root, numeric so runAsNonRoot can check it.
        build_args=(("RUN_AS", "65534:65534"),),
    ),
)
