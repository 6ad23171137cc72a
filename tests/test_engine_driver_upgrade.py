"""A driver upgrade as an operator runs it, with the real engine on a real control plane (kwok GCU nodes that
advertise enflame.com/gcu): the preview prints the plan, `up` rolls node by node moving only GCU pods,
a node whose new driver never gets Ready halts it, the next `up` resumes, destroy leaves nothing behind.
"""

from __future__ import annotations

import json
import re

import pytest
from driver_fixtures import CordonWatch, all_ready, apply, gcu_job, ordinary, uids
from engine import DRIVER_LABEL, GCU_NODE_LABELS, GCUS, engine_stack, node, outputs, set_json_config
from harness import seed_spec
from pulumi import automation as auto
from realnode_fixtures import wait_until

from components.providers import driver_rollout as du

GCU_NODES = ["gcu-node-1", "gcu-node-2", "gcu-node-3"]
NODES = [(n, GCU_NODE_LABELS, GCUS) for n in GCU_NODES] + [("cpu-node-1", {})]


def spec(version: str) -> dict:
    return seed_spec(**{"driver.notDeploy": False, "driver.version": version})


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-driver")
    with engine_stack(root, NODES, "driver") as engine:
        engine.stack.remove_config("gcu-stack:blueprint")
        set_json_config(engine.stack, "spec", spec("1.0"))
        set_json_config(engine.stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 20})
        yield engine.stack, engine.cluster, root, engine.policy_config


def test_1_first_up_deploys_the_driver_with_nothing_to_upgrade(upgrade):
    stack, cluster, _, _ = upgrade
    stack.up(on_output=lambda _: None)
    out = outputs(stack)
    assert out["phase"] == "Running" and out["readyResource"] == "6/6"
    daemonset = json.loads(cluster.kubectl("get", "ds", "enflame-gcu-driver", "-n", "kube-system", "-o", "json").stdout)
    assert daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert set(out["driverUpgrade"]["nodes"].values()) == {"current"}
    apply(cluster, [*gcu_job("training", 2), ordinary("web")])
    wait_until(lambda: all_ready(cluster, "app=training", 2) and all_ready(cluster, "app=web", 4), 60, what="workloads")


def test_2_the_preview_prints_the_plan_node_by_node(upgrade):
    stack, cluster, root, policy_config = upgrade
    set_json_config(stack, "spec", spec("2.0"))
    preview = stack.preview(policy_packs=[str(root / "project" / "policies")], policy_pack_configs=[str(policy_config)])
    text = preview.stdout
    assert "driver upgrade planned: artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:1.0 → " in text
    assert "gcu-driver:2.0, 3 of 3 GCU node(s), in 3 wave(s)" in text
    assert "wave 1: gcu-node-1" in text and "wave 3: gcu-node-3" in text
    training = [p["metadata"]["name"] for p in json.loads(cluster.kubectl("get", "pods", "-l", "app=training", "-o", "json").stdout)["items"]]
    assert all(name in text for name in training)  # the pods each eviction moves, by name
    assert "at most 1 of 3 GCU node(s) unavailable at once" in text
    # Only the driver DaemonSet and its rollout change: every other component keeps its objects.
    assert preview.change_summary.get("update", 0) >= 2 and not preview.change_summary.get("replace")


def test_3_up_rolls_node_by_node_moving_only_gcu_pods(upgrade):
    stack, cluster, _, _ = upgrade
    web = uids(cluster, "app=web")
    with CordonWatch(cluster) as watch:
        stack.up(on_output=lambda _: None)
    assert watch.most == 1
    out = outputs(stack)
    assert out["phase"] == "Running"
    assert out["driverUpgrade"]["upgraded"] == GCU_NODES and out["driverUpgrade"]["failed"] == {}
    assert set(out["driverUpgrade"]["nodes"].values()) == {du.DONE}
    assert uids(cluster, "app=web") == web
    for name in GCU_NODES:
        assert not node(cluster, name)["spec"].get("unschedulable")
    images = {p["spec"]["containers"][0]["image"] for p in json.loads(
        cluster.kubectl("get", "pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=enflame-gcu-driver", "-o", "json").stdout)["items"]}
    assert images == {"artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:2.0"}
    upgrade_condition = [c for c in out["conditions"] if c["action"] == "upgrade"]
    assert upgrade_condition and upgrade_condition[0]["progress"] == 100
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", upgrade_condition[0]["lastUpdateTime"]), upgrade_condition


def test_4_a_failed_node_halts_the_rollout_and_the_next_up_resumes(upgrade):
    stack, cluster, _, _ = upgrade
    cluster.kubectl("taint", "node", "gcu-node-2", "gcu-test/broken=true:NoSchedule")
    set_json_config(stack, "spec", spec("3.0"))
    with pytest.raises(auto.CommandError) as caught:
        stack.up(on_output=lambda _: None)
    assert "gcu-node-2 failed at restart driver" in str(caught.value)
    assert node(cluster, "gcu-node-2")["metadata"]["labels"][du.STATE_LABEL] == du.FAILED
    assert node(cluster, "gcu-node-2")["spec"]["unschedulable"] is True
    assert node(cluster, "gcu-node-3")["metadata"]["labels"][du.STATE_LABEL] == du.DONE  # from 2.0: not started at 3.0
    first = node(cluster, "gcu-node-1")["metadata"]["resourceVersion"]
    cluster.kubectl("taint", "node", "gcu-node-2", "gcu-test/broken-")
    stack.up(on_output=lambda _: None)
    out = outputs(stack)
    assert out["driverUpgrade"]["upgraded"] == ["gcu-node-2", "gcu-node-3"]
    assert node(cluster, "gcu-node-1")["metadata"]["resourceVersion"] == first
    assert out["phase"] == "Running"


def test_5_destroy_leaves_no_cordon_label_or_annotation(upgrade):
    stack, cluster, _, _ = upgrade
    stack.destroy(on_output=lambda _: None)
    for name in GCU_NODES:
        meta = node(cluster, name)["metadata"]
        ours = [k for k in meta["labels"] if k.startswith("enflame.com/gcu.") and k != DRIVER_LABEL]
        assert not ours, meta["labels"]  # the driver label was the test's (the "pre-installed driver" mark)
        assert not [k for k in (meta.get("annotations") or {}) if "gcu" in k], meta.get("annotations")
        assert not node(cluster, name)["spec"].get("unschedulable")
