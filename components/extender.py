"""What the cluster's kube-scheduler needs to use the GCU-share scheduler extender."""

from __future__ import annotations

import yaml

from .catalog import GCUSHARE_RESOURCE
from .resolve import ResolvedComponent
from .settings import Options

FILTER_VERB = "filter"
BIND_VERB = "bind"


def extender_url(options: Options) -> str:
    # kube-scheduler runs on the host network of a control-plane node: the node port is local there.
    return f"http://127.0.0.1:{options.gcushare_scheduler_node_port}/gcushare-scheduler"


def scheduler_configuration(options: Options) -> str:
    """A KubeSchedulerConfiguration with the extender, for `kube-scheduler --config`."""
    document = {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": "/etc/kubernetes/scheduler.conf"},
        "extenders": [
            {
                "urlPrefix": extender_url(options),
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


def extender_outputs(component: ResolvedComponent, options: Options) -> dict:
    (workload,) = component.workloads
    return {
        "url": extender_url(options),
        "service": f"{workload.name}.{component.namespace}",
        "schedulerConfiguration": scheduler_configuration(options),
    }
