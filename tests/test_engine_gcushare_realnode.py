"""GCU-share end to end with the real engine on a real node: `pulumi up` of the seed blueprint with GCU-share
instead of the device plugin (as the seed tells operators to switch), then the scheduler configuration the stack
exports handed to kube-scheduler as README says, and pods bound through the extender.

A real kubelet with its own containerd and 4 stand-in GCUs (devtools/realnode.py) next to a simulated CPU
node; the images are built from images/ with the stand-ins of devtools/standin_node.py (the GCU-share plugin is
devtools/fakegcu with --memory-unit, the extender devtools/fakeextender). GFD is a stand-in that labels nothing:
the node is started with the enflame.com/gcu.count label GFD sets.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml
from engine import node as node_object
from engine import outputs, real_node_stack, up_converged
from realnode_fixtures import apply, component_pod, failed_scheduling, get, shell_pod, wait_pod_phase, wait_until

from components.names import GCUSHARE_RESOURCE
from devtools import fakeextender, standin_node
from devtools.realnode import netns_name

NODE = f"gcu-share-{os.getpid()}"
LABELS = {"enflame.com/gcu.driver.present": "true",
          "enflame.com/gcu.count": "4"}


@pytest.fixture(scope="module")
def real(tmp_path_factory):   # real_node_stack takes the real-node lock itself
    spec = standin_node.blueprint(gcushare=True)["spec"]
    with real_node_stack(tmp_path_factory.mktemp("engine-gcushare"), NODE, LABELS, spec, name="gcushare") as (cluster, node, stack, _):
        yield {"cluster": cluster, "node": node, "stack": stack}


def _share_pod(name: str, shares: int) -> dict:
    pod = shell_pod(name, standin_node.NFD_IMAGE, "sleep 3600", restart="Always")
    pod["spec"]["containers"][0]["resources"] = {"limits": {GCUSHARE_RESOURCE: str(shares)}}
    pod["spec"]["runtimeClassName"] = "enflame"
    return pod


def test_1_up_deploys_gcushare_and_its_memory_becomes_allocatable(real):
    up_converged(real["stack"])
    out = outputs(real["stack"])
    assert out["phase"] == "Running", out
    assert node_object(real["cluster"], NODE)["status"]["allocatable"][GCUSHARE_RESOURCE] == "64"   # 4 GCUs x 16 GiB
    assert out["validation"]["passed"] is True and out["validation"]["resource"] == GCUSHARE_RESOURCE, out["validation"]


def test_2_the_exported_configuration_makes_the_scheduler_bind_through_the_extender(real):
    cluster, node = real["cluster"], real["node"]
    exported = yaml.safe_load(outputs(real["stack"])["gcushareSchedulerExtender"]["schedulerConfiguration"])
    cluster.restart_scheduler(exported, netns=netns_name(NODE), address=node.node_ip)
    (extender,) = cluster.scheduler_extenders()
    assert extender["urlPrefix"] == exported["extenders"][0]["urlPrefix"]

    apply(cluster, _share_pod("share-job", 10))
    pod = wait_pod_phase(cluster, node, "default", "share-job", phases=("Running",))
    assert pod["spec"]["nodeName"] == NODE
    assert pod["metadata"]["annotations"][fakeextender.BOUND_BY_ANNOTATION].endswith(f" -> {NODE}")
    extender_pod = component_pod(cluster, "gcushareScheduler")
    log = node.pod_log("kube-system", extender_pod["metadata"]["name"])
    assert f"bind default/share-job -> {NODE}: bound, 10 {GCUSHARE_RESOURCE} on GCU 0" in log, log

    apply(cluster, _share_pod("too-big", 20))   # 54 free on the node, at most 16 on one GCU
    assert f"gcushare: asks 20 {GCUSHARE_RESOURCE} on one GCU" in wait_until(
        lambda: failed_scheduling(cluster, "too-big"), 60, "too-big's FailedScheduling")
    assert not get(cluster, "pod", "too-big", "default")["spec"].get("nodeName")
    cluster.kubectl("delete", "pod", "share-job", "too-big", "--wait=true", timeout=120)


def test_3_destroy_removes_gcushare(real):
    cluster = real["cluster"]
    cluster.restart_scheduler()
    real["stack"].destroy(on_output=lambda _: None)

    def stack_pods() -> list[str]:
        pods = json.loads(cluster.kubectl("get", "pods", "-A", "-l", "app.kubernetes.io/managed-by=pulumi",
                                          "-o", "json").stdout)["items"]
        return [p["metadata"]["name"] for p in pods]

    wait_until(lambda: stack_pods() == [], 120, "no pod of the stack left", diagnose=lambda: str(stack_pods()))
    allocatable = node_object(cluster, NODE)["status"].get("allocatable") or {}
    assert allocatable.get(GCUSHARE_RESOURCE, "0") == "0", allocatable
