"""The driver on two real nodes, end to end with the real engine.

Each real node (devtools/realnode.py: kubelet + containerd, 4 stand-in GCUs) runs the driver's pod from images/driver
around the stand-in installer of devtools/standin_driver.py, which loads its version into the node's stand-in kernel.
The rest is as on a GCU node: the image's entrypoint checks the version, finds the node's processes that have a
/dev/gcuN open (a GCU pod's, which it sees through hostPID: each node's containers are in a PID namespace of its own),
unloads and installs. GCU jobs (a Deployment whose pods each hold their device open, with a PodDisruptionBudget) and
ordinary pods run on the nodes while `pulumi up` rolls 1.0 → 2.0 out; then a driver pod deleted by hand under a job
must refuse to unload the module and say which pod holds which device.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import pytest
from driver_fixtures import CordonWatch, PrepullWatch, all_ready, apply, pods, uids
from engine import node as node_object
from engine import outputs, real_node_stack, set_json_config, up_converged
from realnode_fixtures import wait_until

from components.names import PAUSED_FOR_DRIVER_UPGRADE
from components.providers import driver_rollout as du
from devtools import standin_driver, standin_node
from devtools.realnode import REAL_NODE_LABEL

FIRST = f"gcu-drv-a-{os.getpid()}"
SECOND = f"gcu-drv-b-{os.getpid()}"
NODES = sorted([FIRST, SECOND])
DRIVER_PODS = "app.kubernetes.io/name=enflame-gcu-driver"
# 3.0: for the driver pod deleted by hand while the rollout to it waits for its maintenance window.
VERSIONS = ("1.0", "2.0", "3.0")
PULLED = "2.0"   # served by a registry, not imported
IMAGE = f"{standin_node.REPOSITORY}/gcu-driver"


def spec(version: str) -> dict:
    return standin_node.blueprint(driver=version)["spec"]


def training(replicas: int = 2) -> list[dict]:
    """GCU jobs: each pod holds one GCU's device file open, as a job using it does; at most one may be evicted at a time."""
    labels = {"app": "training"}
    hold = 'for d in /dev/gcu*; do exec 3<"$d"; break; done; exec sleep 3600'
    pod = {"runtimeClassName": "enflame", "terminationGracePeriodSeconds": 1,
           "nodeSelector": {"enflame.com/gcu.present": "true"},
           "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
               "labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}}]}},
           "containers": [{"name": "train", "image": standin_node.NFD_IMAGE, "imagePullPolicy": "Never",
                           "command": ["/bin/sh", "-c", hold], "resources": {"limits": {"enflame.com/gcu": "1"}}}]}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "training", "namespace": "default"},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": pod}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "training", "namespace": "default"},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}},
    ]


def web() -> dict:
    """Ordinary pods on the GCU nodes: a driver upgrade leaves them alone."""
    labels = {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "nodeSelector": {REAL_NODE_LABEL: "true"}, "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "web", "image": standin_node.NFD_IMAGE, "imagePullPolicy": "Never",
                                "command": ["sleep", "3600"]}]}}}}


class Env:
    def __init__(self, cluster, stack, nodes: dict):
        self.cluster, self.stack, self.nodes = cluster, stack, nodes

    def driver_pods(self) -> dict[str, dict]:
        found = [p for p in pods(self.cluster, DRIVER_PODS, "kube-system") if not p["metadata"].get("deletionTimestamp")]
        return {p["spec"]["nodeName"]: p for p in found}

    def loaded(self) -> dict[str, str]:
        return {name: standin_driver.loaded_version(node) for name, node in self.nodes.items()}


def pull_events(cluster) -> list[dict]:
    """The kubelets' image events in kube-system (reason Pulled: pulled, or found already present)."""
    events = json.loads(cluster.kubectl("get", "events", "-n", "kube-system", "-o", "json").stdout)["items"]
    return [e for e in events if e.get("reason") == "Pulled"]


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


@pytest.fixture(scope="module")
def real(tmp_path_factory):   # real_node_stack takes the real-node lock itself
    root = tmp_path_factory.mktemp("engine-driver-realnode")
    # 2.0 is not imported: the nodes pull it from a registry on this machine, as a cluster pulls a new driver.
    with real_node_stack(root, FIRST, {}, spec("1.0"), name="driver-realnode", driver_versions=VERSIONS,
                         pulled_drivers=(PULLED,)) as made:
        second = made.join(SECOND, {}, fake_gcus=4)
        yield Env(made.cluster, made.stack, {FIRST: made.node, SECOND: second})


def test_1_up_installs_the_driver_on_both_real_nodes(real):
    up_converged(real.stack)
    out = outputs(real.stack)
    assert out["phase"] == "Running" and out["readyResource"] == "6/6", out
    assert sorted(out["clusterGCUNodes"]) == NODES
    # The stand-in installer ran in each node's driver pod and loaded 1.0 into that node's kernel.
    assert real.loaded() == {FIRST: "1.0", SECOND: "1.0"}
    driver_pods = real.driver_pods()
    assert sorted(driver_pods) == NODES and all(ready(p) for p in driver_pods.values())
    assert set(out["driverUpgrade"]["nodes"].values()) == {"current"}
    assert out["validation"]["passed"] is True
    apply(real.cluster, [*training(), web()])
    wait_until(lambda: all_ready(real.cluster, "app=training", 2) and all_ready(real.cluster, "app=web", 2), 120,
               "the GCU jobs and the ordinary pods Ready")


def test_2_a_new_version_rolls_out_node_by_node_under_the_jobs_pdb(real):
    web_before = uids(real.cluster, "app=web")
    upgraded = spec("2.0")
    upgraded["driver"]["imagePullPolicy"] = "IfNotPresent"   # the nodes do not have 2.0: they pull it
    set_json_config(real.stack, "spec", upgraded)
    with CordonWatch(real.cluster, pdb="training") as watch, PrepullWatch(real.cluster) as pulls:
        up_converged(real.stack)
    out = outputs(real.stack)
    assert out["phase"] == "Running" and out["validation"]["passed"] is True, out
    rollout = out["driverUpgrade"]
    assert sorted(rollout["upgraded"]) == NODES and rollout["failed"] == {}, rollout
    # Each node's kubelet had started the 2.0 image (a pre-pull pod) before the rollout cordoned the first node.
    first_cordon = min(s["at"] for report in rollout["reports"].values() for s in report["states"] if s["state"] == du.CORDONED)
    assert sorted(pulls.started) == NODES and max(pulls.started.values()) <= first_cordon, (pulls.started, rollout["reports"])
    wait_until(lambda: not pods(real.cluster, "gcu-stack.enflame.com/driver-prepull-of", "kube-system"), 30,
               "the pre-pull pods deleted")
    # One node at a time; the jobs' budget never broken; each node's agents paused while its driver was replaced.
    assert watch.most == 1 and watch.fewest_healthy >= 1, (watch.most, watch.fewest_healthy)
    assert watch.paused == set(NODES), watch.paused
    # 2.0 loaded on both nodes by pods of the 2.0 image, each node uncordoned in state done, its agents back.
    assert real.loaded() == {FIRST: "2.0", SECOND: "2.0"}
    driver_pods = real.driver_pods()
    assert {p["spec"]["containers"][0]["image"] for p in driver_pods.values()} == {f"{IMAGE}:2.0"}
    assert all(ready(p) for p in driver_pods.values())
    assert set(rollout["nodes"].values()) == {du.DONE}
    # What each kubelet said: the pre-pull pod pulled 2.0 from the registry; the driver pod found it there.
    pulled = pull_events(real.cluster)
    revision = {p["metadata"]["labels"][du.REVISION_LABEL] for p in driver_pods.values()}.pop()
    for name in NODES:
        assert any(e["involvedObject"]["name"].endswith(f"-prepull-{revision}-{name}")
                   and e["message"].startswith(f'Successfully pulled image "{IMAGE}:2.0"') for e in pulled), pulled
    for name, pod in driver_pods.items():
        assert any(e["involvedObject"]["name"] == pod["metadata"]["name"] and "already present on machine" in e["message"]
                   for e in pulled), (name, pulled)
    for name in NODES:
        node = node_object(real.cluster, name)
        labels = node["metadata"]["labels"]
        assert not node["spec"].get("unschedulable") and labels[du.STATE_LABEL] == du.DONE, node["metadata"]
        assert PAUSED_FOR_DRIVER_UPGRADE not in labels.values(), labels
    # The GCU jobs were moved (each once), the ordinary pods untouched.
    evicted = [pod for report in rollout["reports"].values() for pod in report["evicted"]]
    assert evicted and len(evicted) == len(set(evicted)), rollout["reports"]
    assert uids(real.cluster, "app=web") == web_before
    wait_until(lambda: all_ready(real.cluster, "app=training", 2), 120, "the GCU jobs Ready again")


def test_3_a_driver_pod_deleted_by_hand_under_a_job_refuses_to_unload_and_names_the_holder(real):
    # The rollout to 3.0 waits for its maintenance window; the DaemonSet already carries 3.0 (it is OnDelete).
    now = datetime.now(timezone.utc)
    closed = {"start": (now + timedelta(hours=3)).strftime("%H:%M"), "end": (now + timedelta(hours=4)).strftime("%H:%M")}
    set_json_config(real.stack, "driverUpgrade", {"windows": [closed]})
    set_json_config(real.stack, "spec", spec("3.0"))
    real.stack.up(on_output=lambda _: None)
    assert outputs(real.stack)["driverUpgrade"]["paused"].startswith("outside the maintenance windows")
    assert real.loaded() == {FIRST: "2.0", SECOND: "2.0"}
    # An operator deletes the driver pod of a node where a job holds a GCU.
    job = next(p for p in pods(real.cluster, "app=training") if ready(p))
    where, holder = job["spec"]["nodeName"], job["metadata"]["name"]
    old = real.driver_pods()[where]
    real.cluster.kubectl("delete", "pod", "-n", "kube-system", old["metadata"]["name"], "--wait=false")
    node = real.nodes[where]

    def refusing() -> str:
        pod = real.driver_pods().get(where)
        if not pod or pod["metadata"]["uid"] == old["metadata"]["uid"]:
            return ""
        try:
            log = node.pod_log("kube-system", pod["metadata"]["name"])
        except Exception:
            return ""
        return log if "so nothing is unloaded. Held by:" in log else ""

    log = wait_until(refusing, 120, f"the new driver pod on {where} refusing to unload")
    assert "kernel module enflame 2.0 is loaded but this image installs 3.0" in log, log
    assert f"of pod {holder} has /dev/gcu" in log, log
    time.sleep(standin_driver.RETRY_SECONDS * 2)   # it keeps refusing, and is not Ready
    new = real.driver_pods()[where]
    assert not ready(new) and new["spec"]["containers"][0]["image"] == f"{IMAGE}:3.0"
    assert real.loaded()[where] == "2.0"
    # The jobs end: with nothing holding the device, it goes on by itself.
    real.cluster.kubectl("delete", "deployment,pdb", "training", "--wait=true", timeout=120)
    wait_until(lambda: real.loaded()[where] == "3.0" and ready(real.driver_pods()[where]), 120,
               f"driver 3.0 on {where} once the jobs are gone")
    real.stack.remove_config("gcu-stack:driverUpgrade")
