"""The seed blueprint on a real GCU node, end to end with the real engine.

A real kubelet with its own containerd (devtools/realnode.py, stand-in GCU devices)
next to a simulated CPU node. The component images are built from images/ with stand-in
packages (the device plugin is the project's stand-in plugin, the toolkit's runtime runs
runc) and imported into the node's containerd; the blueprint runs them with
imagePullPolicy Never. Nothing is simulated on the GCU node: NFD (the real one, which finds the
stand-in GCUs as PCI devices of Enflame's vendor id and labels the node), the toolkit (which
activates enflame in containerd from its pod and restarts it), the device plugin
registering enflame.com/gcu with the kubelet, the exporter, GFD, the post-deploy
validation pod and a GCU workload all really run there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from engine import changes, outputs, real_node_stack, up_converged
from engine import node as node_object
from pulumi import automation as auto
from realnode_fixtures import apply, shell_pod, wait_pod_phase, wait_until

from components.node import cri_client
from devtools import standin_node
from devtools.realnode import RealNode

NFD = "feature.node.kubernetes.io/pci-1e36.present"
NFD_OWN = "nfd.node.kubernetes.io/feature-labels"   # the labels NFD's master put on the node
NODE = f"gcu-real-{os.getpid()}"
LATE = f"gcu-late-{os.getpid()}"
AGENTS = {"toolkit", "devicePlugin", "exporter", "gfd", "nfd"}   # the seed's pods on every GCU node


class Env:
    def __init__(self, cluster, node: RealNode, stack: auto.Stack, root: Path):
        self.cluster, self.node, self.stack, self.root = cluster, node, stack, root

    def outputs(self) -> dict:
        return outputs(self.stack)

    def node_object(self) -> dict:
        return node_object(self.cluster, NODE)

    def cri(self) -> dict:
        return cri_client.runtimes(str(self.node.containerd_socket))


@pytest.fixture(scope="module")
def real(tmp_path_factory):   # real_node_stack takes the real-node lock itself
    root = tmp_path_factory.mktemp("engine-realnode")
    # The stand-in GCUs play a node with its driver installed (what NFD labels when the module is loaded); the
    # GCU labels are NFD's to set.
    labels = {"enflame.com/gcu.driver.present": "true"}
    with real_node_stack(root, NODE, labels, standin_node.blueprint()["spec"], name="realnode") as (cluster, node, stack, join):
        env = Env(cluster, node, stack, root)
        env.config_before = node.containerd_config.read_bytes()
        env.join = join
        yield env


def test_1_up_brings_the_seed_up_on_the_real_node_and_gcus_become_allocatable(real):
    # A pod running before the runtime is activated: containerd restarts under it, it does not.
    apply(real.cluster, shell_pod("before", standin_node.NFD_IMAGE, "sleep 3600", node_name=NODE))
    before = wait_pod_phase(real.cluster, real.node, "default", "before", ("Running",))
    started = before["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    containerd = real.node.containerd_pid()
    up_converged(real.stack)
    out = real.outputs()
    assert out["phase"] == "Running" and out["readyResource"] == "5/5", out
    assert out["clusterGCUNodes"] == [NODE]
    # NFD found the stand-in GCUs on the node's PCI bus and labelled it, its rule marking it a GCU node.
    meta = real.node_object()["metadata"]
    assert meta["labels"][NFD] == "true" and meta["labels"]["enflame.com/gcu.present"] == "true"
    assert {"pci-1e36.present", "enflame.com/gcu.present"} <= set(meta["annotations"][NFD_OWN].split(",")), meta
    assert real.node_object()["status"]["allocatable"]["enflame.com/gcu"] == "4"
    assert out["validation"]["passed"] is True and out["validation"]["nodes"][NODE]["workload"] == "passed"
    # The toolkit's pod activated enflame in this node's containerd, and containerd restarted for it.
    assert real.cri()["default"] == "enflame" and real.node.containerd_pid() != containerd
    # ... with the runtime it installed in the node's /usr/local/enflame, which is the node's own.
    assert (real.node.usr_local_enflame / "bin" / "enflame-container-runtime").is_file()
    after = json.loads(real.cluster.kubectl("get", "pod", "before", "-o", "json").stdout)
    assert after["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == started
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0


def test_2_a_pod_asking_for_one_gcu_runs_and_sees_its_device_file(real):
    pod = shell_pod("gcu-job", standin_node.NFD_IMAGE, "ls /dev | grep '^gcu'",
                    node_name=NODE, limits={"enflame.com/gcu": "1"})
    pod["spec"]["runtimeClassName"] = "enflame"
    apply(real.cluster, pod)
    wait_pod_phase(real.cluster, real.node, "default", "gcu-job", ("Succeeded",))
    devices = real.node.pod_log("default", "gcu-job").split()
    assert len(devices) == 1 and devices[0].startswith("gcu"), devices


def test_3_a_second_up_changes_and_restarts_nothing(real):
    containerd = real.node.containerd_pid()
    result = up_converged(real.stack)
    assert changes(result.summary.resource_changes) == {}
    assert real.node.containerd_pid() == containerd


def test_4_a_node_that_joins_after_up_comes_up_with_no_further_up(real):
    late = real.join(LATE, {"enflame.com/gcu.driver.present": "true"}, fake_gcus=1)
    real.late, real.late_config_before = late, late.containerd_config.read_bytes()

    def labels() -> dict:
        return node_object(real.cluster, LATE)["metadata"].get("labels") or {}

    # NFD finds its GCU and labels it; the stack's NodeFeatureRule makes it a GCU node.
    wait_until(lambda: labels().get(NFD) == "true" and labels().get("enflame.com/gcu.present") == "true", 180,
               f"NFD labelling {LATE}", diagnose=lambda: json.dumps(labels()))

    def agents_running() -> bool:
        pods = json.loads(real.cluster.kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={LATE}",
                                               "-o", "json").stdout)["items"]
        running = {p["metadata"]["labels"].get("app.kubernetes.io/component") for p in pods
                   if p["status"].get("phase") == "Running"}
        return AGENTS <= running

    wait_until(agents_running, 240, f"the agents running on {LATE}")
    # The toolkit's pod activates enflame in its containerd; the device plugin registers its one GCU.
    wait_until(lambda: cri_client.runtimes(str(late.containerd_socket))["default"] == "enflame", 120,
               f"enflame the default runtime of {LATE}'s containerd")
    wait_until(lambda: node_object(real.cluster, LATE)["status"]["allocatable"].get("enflame.com/gcu") == "1", 120,
               f"enflame.com/gcu allocatable on {LATE}")
    pod = shell_pod("late-job", standin_node.NFD_IMAGE, "ls /dev | grep '^gcu'", node_name=LATE,
                    limits={"enflame.com/gcu": "1"})
    pod["spec"]["runtimeClassName"] = "enflame"
    apply(real.cluster, pod)
    wait_pod_phase(real.cluster, late, "default", "late-job", ("Succeeded",))
    assert late.pod_log("default", "late-job").split() == ["gcu0"]
    # The next preview records what the stack keeps about the new node and replaces, creates or deletes nothing.
    lines: list[str] = []
    preview = real.stack.preview(diff=True, on_output=lines.append)
    assert set(preview.change_summary) <= {"same", "update"}, (preview.change_summary, "".join(lines)[-4000:])
    updated = {line.split()[1].rstrip(":") for line in lines if line.lstrip().startswith("~ ") and "(update)" in line}
    recorded = {f"pulumi-python:dynamic/gcu:{kind}" for kind in ("GcuNodes", "GcuValidation", "ContainerRuntime")}
    # (GcuNodes at least: the deploy labels it keeps on GCU nodes are missing on the new one.)
    assert "pulumi-python:dynamic/gcu:GcuNodes" in updated and updated <= recorded, "".join(lines)[-4000:]
    print(f"\nthe preview after {LATE} joined: {preview.change_summary}, updating {sorted(updated)}")
    up_converged(real.stack)
    assert sorted(real.outputs()["clusterGCUNodes"]) == sorted([NODE, LATE])
    real.cluster.kubectl("delete", "pod", "late-job", "--wait=true")


def test_5_destroy_restores_the_nodes_exactly_and_leaves_them_ready(real):
    real.cluster.kubectl("delete", "pod", "before", "gcu-job", "--wait=true")
    real.stack.destroy(on_output=lambda _: None)
    assert real.late.containerd_config.read_bytes() == real.late_config_before
    assert real.node.containerd_config.read_bytes() == real.config_before
    assert not list(real.node.containerd_conf_d.glob("*enflame*"))
    wait_until(lambda: real.cri()["default"] != "enflame", 60, "containerd without enflame")
    meta = real.node_object()
    # Only the labels the node started with (its "installed driver" mark) are left: NFD's went with NFD.
    assert not [k for k in meta["metadata"]["labels"] if k.startswith("enflame.com/gcu") and k != "enflame.com/gcu.driver.present"]
    assert not [k for k in meta["metadata"]["labels"] if k.startswith("feature.node.kubernetes.io/")], meta
    assert not [k for k in meta["metadata"].get("annotations") or {} if k.startswith("nfd.node.kubernetes.io/")]
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in meta["status"]["conditions"])
