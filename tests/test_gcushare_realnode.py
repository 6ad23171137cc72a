"""GCU-share on a real node: the scheduler really uses the extender. Never skipped.

One LocalCluster (the Kubernetes devtools builds, no simulated node) and one RealNode with 4 stand-in GCUs. The stack's
gcusharePlugin and gcushareScheduler objects (components.plan.objects, as the stack declares them) run there with
the project's images built around the stand-ins: devtools/fakegcu in GCU-share mode advertises each GCU's 16 GiB
as enflame.com/gcu-memory shares, devtools/fakeextender answers kube-scheduler's filter and bind calls and binds
through the API server. The embedded control plane's kube-scheduler is restarted with the configuration the stack
exports (only clientConnection.kubeconfig replaced) on the node's host network, as on a control-plane node, where
the extender's URL (a node port on 127.0.0.1) is answered by the node's kube-proxy.

GFD, a stand-in here, would label the node enflame.com/gcu.count; the node is started with that label.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml
from realnode_fixtures import apply, component_pod, failed_scheduling, get, shell_pod, wait_pod_phase, wait_until

from components import catalog
from components.catalog.gcushare_scheduler import SchedulerSettings, scheduler_configuration
from components.names import GCUSHARE_RESOURCE
from components.plan.objects import component_manifests
from components.resolve import resolve
from components.spec import BaseFields
from devtools import fakeextender, fakegcu, imagebuild
from devtools.localcluster import LocalCluster
from devtools.realnode import RealNode, netns_name
from devtools.sweep import sweep_machine

pytestmark = pytest.mark.timeout(1800)

RUN = f"s{os.getpid() % 100000}"
NODE = f"gcu-{RUN}-1"
GCUS, GIB_PER_GCU = 4, 16
LABELS = {"enflame.com/gcu.present": "true", "feature.node.kubernetes.io/pci-1e36.present": "true",
          "enflame.com/gcu.count": str(GCUS)}
INSTANCE = "gcushare-realnode-test"
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, real_node_shared):
    sweep_machine()
    with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=[], audit=False,
                      extra_apiserver_args=["--kubelet-preferred-address-types=InternalIP,Hostname"]) as c:
        yield c


@pytest.fixture(scope="module")
def node(cluster, tmp_path_factory):
    started = time.monotonic()
    n = RealNode.for_cluster(cluster, tmp_path_factory.mktemp("node"), NODE, labels=LABELS, fake_gcus=GCUS)
    n.start()
    TIMES["node start (to Ready)"] = time.monotonic() - started
    yield n
    n.stop()


@pytest.fixture(scope="module")
def images(node, tmp_path_factory):
    """The project's gcusharePlugin and gcushareScheduler images around the stand-ins, imported into the node."""
    workdir = tmp_path_factory.mktemp("images")
    started = time.monotonic()
    with imagebuild.build_daemon(workdir / "dockerd") as dockerd:
        refs = {"gcusharePlugin": fakegcu.build_gcushare_plugin_image(dockerd, workdir / "plugin"),
                "gcushareScheduler": fakeextender.build_image(dockerd, workdir / "extender")}
        TIMES["images: build"] = time.monotonic() - started
        node.import_images(dockerd, list(refs.values()))
    TIMES["images: build + import"] = time.monotonic() - started
    return refs


def _objects(key: str, image: str) -> list[dict]:
    definition = catalog.BY_KEY[key]
    repository, _, rest = image.rpartition("/")
    name, _, tag = rest.partition(":")
    spec = (definition.spec_model or BaseFields).model_validate({"repository": repository, "image": name, "version": tag,
                                                 "imagePullPolicy": "Never"})
    return component_manifests(resolve(definition, spec, f"spec.{key}"), INSTANCE)


@pytest.fixture(scope="module")
def gcushare(cluster, node, images):
    """Both components running, the node's shares allocatable, and kube-scheduler on the exported configuration."""
    started = time.monotonic()
    for key in ("gcusharePlugin", "gcushareScheduler"):
        for manifest in _objects(key, images[key]):
            apply(cluster, manifest)
    shares = GCUS * GIB_PER_GCU
    wait_until(lambda: int((node.allocatable() or {}).get(GCUSHARE_RESOURCE, "0")) == shares, 180,
               f"{GCUSHARE_RESOURCE}: {shares} in {NODE}'s allocatable")
    wait_until(lambda: any(c.get("ready") for c in (component_pod(cluster, "gcushareScheduler").get("status") or {}).get("containerStatuses") or []),
               180, "the extender's pod ready")
    TIMES["components applied -> shares allocatable, extender ready"] = time.monotonic() - started
    exported = yaml.safe_load(scheduler_configuration(SchedulerSettings().node_port))
    started = time.monotonic()
    config = cluster.restart_scheduler(exported, netns=netns_name(NODE), address=node.node_ip)
    TIMES["kube-scheduler restarted with the exported configuration"] = time.monotonic() - started
    try:
        yield {"exported": exported, "config": config}
    finally:
        cluster.restart_scheduler()   # back to the machine's loopback before the node (its namespace) goes


def _share_pod(name: str, image: str, shares: int) -> dict:
    pod = shell_pod(name, image, "ls /dev | grep '^gcu' | tr '\\n' ' '; echo; sleep 3600", restart="Always")
    pod["spec"]["containers"][0]["resources"] = {"limits": {GCUSHARE_RESOURCE: str(shares)}}
    return pod


def _extender_log(cluster, node) -> str:
    pod = component_pod(cluster, "gcushareScheduler")
    return node.pod_log(pod["metadata"]["namespace"], pod["metadata"]["name"])


def test_the_stand_ins_go_unit_tests_pass():
    assert "--- PASS: TestFilterWantsOneGcuWithRoomAndBindPacksTheFullestThatFits" in fakeextender.go_test()
    # (the GCU-share mode of the plugin is tested with the plugin's other Go tests, in tests/test_realnode.py)


def test_kube_scheduler_runs_the_exported_configuration(cluster, gcushare):
    exported = gcushare["exported"]
    running = json.loads(gcushare["config"].read_text())
    assert running["clientConnection"]["kubeconfig"] == str(cluster.workdir / "scheduler.kubeconfig")
    assert {**running, "clientConnection": exported["clientConnection"]} == exported, "only the kubeconfig differs"
    (extender,) = cluster.scheduler_extenders()
    (declared,) = exported["extenders"]
    assert extender["urlPrefix"] == declared["urlPrefix"] and extender["bindVerb"] == declared["bindVerb"]
    assert extender["managedResources"] == [{"name": GCUSHARE_RESOURCE}]   # ignoredByScheduler false (omitted)


def test_pods_asking_for_gcu_memory_are_filtered_and_bound_by_the_extender(cluster, node, gcushare):
    image = node.sandbox_image
    for name in ("share-1", "share-2"):
        apply(cluster, _share_pod(name, image, 10))
        wait_pod_phase(cluster, node, "default", name, phases=("Running",))
    pods = {name: get(cluster, "pod", name, "default") for name in ("share-1", "share-2")}
    log = _extender_log(cluster, node)
    for name, pod in pods.items():
        assert pod["spec"]["nodeName"] == NODE
        annotations = pod["metadata"]["annotations"]
        assert annotations[fakeextender.BOUND_BY_ANNOTATION].endswith(f" -> {NODE}"), annotations
        assert f"filter default/{name} asks 10 {GCUSHARE_RESOURCE}: fits [{NODE}]" in log, log
        assert f"bind default/{name} -> {NODE}: bound, 10 {GCUSHARE_RESOURCE} on GCU" in log, log
    # 10 of a GCU's 16 leaves 6: the second pod goes to another GCU.
    indexes = {pod["metadata"]["annotations"][fakeextender.GCU_INDEX_ANNOTATION] for pod in pods.values()}
    assert indexes == {"0", "1"}, indexes
    # The kubelet gave each its shares: the stand-in hands a container the GCUs its shares are on.
    assert "gcu" in node.pod_log("default", "share-1")


def test_a_pod_that_fits_on_no_single_gcu_stays_pending_with_the_extenders_reason(cluster, node, gcushare):
    # 44 of 64 shares are free on the node, so the scheduler's own check passes, but no GCU has 20.
    apply(cluster, _share_pod("too-big", node.sandbox_image, 20))
    message = wait_until(lambda: failed_scheduling(cluster, "too-big"), 60, "a FailedScheduling event for too-big")
    assert f"gcushare: asks 20 {GCUSHARE_RESOURCE} on one GCU, the most {NODE} has free is 16 of 16" in message, message
    pod = get(cluster, "pod", "too-big", "default")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    cluster.kubectl("delete", "pod", "too-big", "share-1", "share-2", "--wait=true", timeout=120)


def test_times(capsys):
    with capsys.disabled():
        print("\nGCU-share on a real node, times (s):")
        for what, seconds in TIMES.items():
            print(f"  {what:<60} {seconds:6.1f}")
