"""A driver upgrade as an operator runs it, with the real engine on a real control plane (kwok GCU nodes that
advertise enflame.com/gcu): the preview prints the plan, `up` rolls node by node moving only GCU pods,
a node whose new driver never gets Ready halts it, the next `up` resumes, destroy leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from driver_fixtures import (
    CordonWatch,
    all_ready,
    apply,
    gcu_job,
    kill_tree,
    make_not_ready,
    make_ready,
    moved_once,
    names,
    ordinary,
    pending_tainted,
    pods,
    uids,
    wait_settled,
    wave_order,
)
from engine import DRIVER_LABEL, GCU_NODE_LABELS, GCUS, engine_stack, node, outputs, set_json_config, up_converged
from harness import seed_spec
from pulumi import automation as auto
from realnode_fixtures import wait_until
from realservers import PROJECT_DIR

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
    up_converged(stack)
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
    first, _, last = wave_order(cluster, GCU_NODES)   # the node without a GCU job first
    assert f"wave 1: {first} (no GCU pod to evict)" in text and f"wave 3: {last} (evicts default/training-" in text
    assert f"each node carries the taint {du.PENDING_TAINT['key']}:PreferNoSchedule" in text
    training = [p["metadata"]["name"] for p in json.loads(cluster.kubectl("get", "pods", "-l", "app=training", "-o", "json").stdout)["items"]]
    assert all(name in text for name in training)  # the pods each eviction moves, by name
    assert "at most 1 of 3 GCU node(s) unavailable at once" in text
    # Only the driver DaemonSet and its rollout change: every other component keeps its objects.
    assert preview.change_summary.get("update", 0) >= 2 and not preview.change_summary.get("replace")


def test_3_up_rolls_node_by_node_moving_only_gcu_pods(upgrade):
    stack, cluster, _, _ = upgrade
    wait_settled(cluster, GCU_NODES)   # the jobs the last up moved are Ready where they landed
    web = uids(cluster, "app=web")
    order, jobs_before = wave_order(cluster, GCU_NODES), names(cluster, "app=training")
    with CordonWatch(cluster) as watch:
        up_converged(stack)
    assert watch.most == 1
    out = outputs(stack)
    assert out["phase"] == "Running"
    # The plan's order (validation pods running meanwhile are gcu-stack's own: they neither move nor reorder it).
    assert out["driverUpgrade"]["upgraded"] == order and out["driverUpgrade"]["failed"] == {}
    assert pending_tainted(cluster) == set()
    assert set(out["driverUpgrade"]["nodes"].values()) == {du.DONE}
    assert uids(cluster, "app=web") == web
    for name in GCU_NODES:
        assert not node(cluster, name)["spec"].get("unschedulable")
    # Each node's record: the states it went through in order, and the GCU pods moved off it (never an ordinary one).
    reports = out["driverUpgrade"]["reports"]
    assert sorted(reports) == GCU_NODES and {r["result"] for r in reports.values()} == {"upgraded"}
    for name in GCU_NODES:
        states = [s["state"] for s in reports[name]["states"]]
        assert states[0] == du.UPGRADE_REQUIRED and states[-1] == du.DONE and du.EVICTING in states, (name, states)
    # Only GCU jobs, each moved once: the first went to the node upgraded before it, the second to an upgraded one.
    assert len(moved_once(reports, jobs_before)) == len(jobs_before) == 2
    images = {p["spec"]["containers"][0]["image"] for p in json.loads(
        cluster.kubectl("get", "pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=enflame-gcu-driver", "-o", "json").stdout)["items"]}
    assert images == {"artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:2.0"}
    upgrade_condition = [c for c in out["conditions"] if c["action"] == "upgrade"]
    assert upgrade_condition and upgrade_condition[0]["progress"] == 100
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", upgrade_condition[0]["lastUpdateTime"]), upgrade_condition


def test_4_a_failed_node_halts_the_rollout_and_the_next_up_resumes(upgrade):
    stack, cluster, _, _ = upgrade
    wait_settled(cluster, GCU_NODES)   # the jobs the last up moved are Ready where they landed
    first, second, third = wave_order(cluster, GCU_NODES)   # the second node's new driver cannot land
    cluster.kubectl("taint", "node", second, "gcu-test/broken=true:NoSchedule")
    set_json_config(stack, "spec", spec("3.0"))
    with pytest.raises(auto.CommandError) as caught:
        stack.up(on_output=lambda _: None)
    assert f"{second} failed at restart driver" in str(caught.value)
    assert node(cluster, second)["metadata"]["labels"][du.STATE_LABEL] == du.FAILED
    assert node(cluster, second)["spec"]["unschedulable"] is True
    assert node(cluster, third)["metadata"]["labels"][du.STATE_LABEL] == du.DONE  # from 2.0: not started at 3.0
    assert pending_tainted(cluster) == set()   # stopped: no node left repelling jobs
    done_first = node(cluster, first)["metadata"]["resourceVersion"]
    cluster.kubectl("taint", "node", second, "gcu-test/broken-")
    up_converged(stack)
    out = outputs(stack)
    assert out["driverUpgrade"]["upgraded"] == [second, third]   # the failed node first
    assert node(cluster, first)["metadata"]["resourceVersion"] == done_first
    assert out["phase"] == "Running"


def test_4a_a_change_to_nothing_the_driver_installs_restarts_its_pods_with_no_cordon_or_eviction(upgrade):
    stack, cluster, root, policy_config = upgrade
    wait_settled(cluster, GCU_NODES)   # the jobs the last up moved are Ready where they landed
    jobs, before = uids(cluster, "app=training"), driver_pods(cluster)
    set_json_config(stack, "spec", seed_spec(**{"driver.notDeploy": False, "driver.version": "3.0", "driver.imagePullPolicy": "Always"}))
    preview = stack.preview(policy_packs=[str(root / "project" / "policies")], policy_pack_configs=[str(policy_config)])
    # In batches of maxUnavailable (25% of 3: 1 node), though no node is made unavailable.
    assert "driver restart only: 3 of 3 GCU node(s), in 3 batch(es)" in preview.stdout, preview.stdout
    assert all(f"batch {i}: {name}" in preview.stdout for i, name in enumerate(GCU_NODES, 1))
    assert "driver upgrade planned" not in preview.stdout and "at most 0 of 3 GCU node(s) unavailable" in preview.stdout
    with CordonWatch(cluster) as watch:
        up_converged(stack)
    assert watch.most == 0
    out = outputs(stack)["driverUpgrade"]
    assert out["restarted"] == GCU_NODES and out["upgraded"] == [] and out["failed"] == {}
    assert all(r["result"] == "restarted" and r["evicted"] == [] for r in out["reports"].values()), out["reports"]
    assert uids(cluster, "app=training") == jobs
    after = driver_pods(cluster)
    assert all(after[n]["metadata"]["uid"] != before[n]["metadata"]["uid"] for n in GCU_NODES)
    assert {p["spec"]["containers"][0]["imagePullPolicy"] for p in after.values()} == {"Always"}
    assert outputs(stack)["phase"] == "Running"


def test_4a2_outside_its_maintenance_window_up_starts_no_wave_and_the_next_up_inside_one_finishes(upgrade):
    stack, cluster, root, policy_config = upgrade
    wait_settled(cluster, GCU_NODES)   # the jobs the last up moved are Ready where they landed
    now = datetime.now(timezone.utc)

    def window(start_hours: float, end_hours: float) -> dict:   # every day, in UTC, relative to now
        return {"start": (now + timedelta(hours=start_hours)).strftime("%H:%M"),
                "end": (now + timedelta(hours=end_hours)).strftime("%H:%M"), "timeZone": "UTC"}

    set_json_config(stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 20, "windows": [window(3, 4)]})
    set_json_config(stack, "spec", spec("3.1"))
    preview = stack.preview(policy_packs=[str(root / "project" / "policies")], policy_pack_configs=[str(policy_config)])
    assert "no wave starts now: outside the maintenance windows; the next opens" in preview.stdout, preview.stdout
    before = {name: pod["metadata"]["uid"] for name, pod in driver_pods(cluster).items()}
    with CordonWatch(cluster) as watch:
        stack.up(on_output=lambda _: None)
    assert watch.most == 0
    out = outputs(stack)["driverUpgrade"]
    assert out["upgraded"] == [] and out["failed"] == {}
    assert out["paused"].startswith("outside the maintenance windows; the next opens"), out
    assert out["paused"].endswith(f"waiting: {', '.join(wave_order(cluster, GCU_NODES))}"), out
    assert {name: pod["metadata"]["uid"] for name, pod in driver_pods(cluster).items()} == before
    assert pending_tainted(cluster) == set()
    # Everything else was applied: the driver DaemonSet carries 3.1, for the next window.
    daemonset = json.loads(cluster.kubectl("get", "ds", "enflame-gcu-driver", "-n", "kube-system", "-o", "json").stdout)
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"].endswith("gcu-driver:3.1")

    order = wave_order(cluster, GCU_NODES)
    set_json_config(stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 20, "windows": [window(-1, 2)]})
    up_converged(stack)
    out = outputs(stack)["driverUpgrade"]
    assert out["upgraded"] == order and out["paused"] == "" and out["failed"] == {}
    assert {p["spec"]["containers"][0]["image"] for p in driver_pods(cluster).values()} == {
        "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:3.1"}
    set_json_config(stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 20})


def driver_pods(cluster) -> dict[str, dict]:
    found = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=enflame-gcu-driver",
                                       "-o", "json").stdout)["items"]
    return {p["spec"]["nodeName"]: p for p in found if not p["metadata"].get("deletionTimestamp")}


def test_4b_an_up_killed_mid_rollout_is_completed_by_the_next_one_without_state_surgery(upgrade):
    """SIGKILL of `pulumi up` and of every process it started (its plugins too, as the end of a session does) while a
    node is cordoned and its pods evicted; the next command clears the stale lock and what the killed one left (stackops, as
    scripts/gcu-stack runs it), and the next up finishes the rollout: no node stays cordoned, none is upgraded twice."""
    stack, cluster, root, _ = upgrade
    wait_settled(cluster, GCU_NODES)   # the jobs the last up moved are Ready where they landed
    order = wave_order(cluster, GCU_NODES)   # read before the up starts moving jobs
    # The first node with a GCU job (those without go first) is where the kill lands.
    jobs_on = {p["spec"].get("nodeName") for p in pods(cluster, "app=training") if not p["metadata"].get("deletionTimestamp")}
    held = next(n for n in order if n in jobs_on)
    set_json_config(stack, "spec", spec("4.0"))
    env = {**os.environ, **stack.workspace.env_vars, "PYTHONPATH": str(PROJECT_DIR)}
    backend, state_dir, project = env["PULUMI_BACKEND_URL"], root / "state", root / "project"
    # That node's job may not move until the up is killed (its disruption budget allows none meanwhile): the kill
    # lands while the node is cordoned and evicting. Unheld, a quick rollout finished it between the test's poll and
    # the kill (a rehearsal of e400655).
    cluster.kubectl("patch", "pdb", "training", "-n", "default", "--type=merge", "-p", json.dumps({"spec": {"minAvailable": 2}}))
    killed = subprocess.Popen(
        [sys.executable, "-m", "stackops", "run", "--backend", backend, "--state-dir", str(state_dir), "--stack", "driver",
         "--", "pulumi", "up", "--yes", "--skip-preview", "--stack", "driver"],
        cwd=project, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    busy = (du.CORDONED, du.WAITING, du.EVICTING, du.RESTARTING, du.VALIDATING)

    def mid_rollout():
        # That node in the middle of its upgrade: the ones before it are finished, the rest not started.
        return node(cluster, held)["metadata"]["labels"].get(du.STATE_LABEL) in busy

    try:
        wait_until(mid_rollout, 240, what=f"{held} in the middle of its driver upgrade", interval=0.2)
    finally:
        kill_tree(killed.pid)
        killed.wait()
        cluster.kubectl("patch", "pdb", "training", "-n", "default", "--type=merge", "-p", json.dumps({"spec": {"minAvailable": 1}}))
    new_image = "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:4.0"
    at_kill_pods = driver_pods(cluster)
    pods_at_kill = {n: p["metadata"]["uid"] for n, p in at_kill_pods.items()}
    # Upgraded to 4.0 before the kill (a `done` label alone may be the 3.0 rollout's).
    finished_before = [n for n, p in at_kill_pods.items()
                       if p["spec"]["containers"][0]["image"] == new_image and node(cluster, n)["metadata"]["labels"].get(du.STATE_LABEL) == du.DONE]
    assert sorted(finished_before) == sorted(order[:order.index(held)]), (finished_before, order, held)
    assert any(node(cluster, n)["spec"].get("unschedulable") for n in GCU_NODES)  # killed with a node cordoned
    # killed mid-rollout: the node under way and those still to upgrade carry the taint
    assert pending_tainted(cluster) == set(order[order.index(held):]), (pending_tainted(cluster), order, held)

    recovered = subprocess.run(
        [sys.executable, "-m", "stackops", "preflight", "--project-dir", str(project), "--stack", "driver",
         "--backend", backend, "--state-dir", str(state_dir)],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )
    assert recovered.returncode == 0, recovered.stderr
    assert "removed the lock left by" in recovered.stderr, recovered.stderr
    up_converged(stack)
    out = outputs(stack)
    assert out["phase"] == "Running" and out["driverUpgrade"]["failed"] == {}
    assert set(out["driverUpgrade"]["nodes"].values()) <= {du.DONE, "current"}
    for name in GCU_NODES:
        assert not node(cluster, name)["spec"].get("unschedulable"), name
    drivers_after = driver_pods(cluster)
    assert {p["spec"]["containers"][0]["image"] for p in drivers_after.values()} == {new_image}
    for name in finished_before:  # upgraded before the kill: not again
        assert drivers_after[name]["metadata"]["uid"] == pods_at_kill[name], name
    assert pending_tainted(cluster) == set()   # the killed rollout's taints are gone too


def test_4c_a_node_deleted_and_another_notready_mid_rollout_are_reported_and_the_next_up_finishes(upgrade):
    """Through the engine: gcu-node-1 is deleted while it waits for its new driver, gcu-node-3's kubelet is down."""
    import threading
    import time

    stack, cluster, _, _ = upgrade
    wait_settled(cluster, GCU_NODES)   # the jobs the last up moved are Ready where they landed
    # No GCU job here: the waves go by name (gcu-node-1 first), and with two of the three GCU nodes gone a job's
    # disruption budget would hold the last eviction for evictionTimeoutSeconds (a limit of its own, tried in test_4);
    # the time measured is the deletion's and the NotReady node's alone.
    cluster.kubectl("delete", "deployment,pdb", "training", "-n", "default")
    wait_until(lambda: not pods(cluster, "app=training"), 60, what="the GCU job gone")
    cluster.kubectl("taint", "node", "gcu-node-1", "gcu-test/broken=true:NoSchedule")  # its new driver cannot land
    make_not_ready(cluster, "gcu-node-3")
    set_json_config(stack, "spec", spec("5.0"))
    set_json_config(stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 120})
    result: dict = {}

    def up():
        try:
            stack.up(on_output=lambda _: None)
        except auto.CommandError as error:
            result["error"] = str(error)
        result["done"] = time.monotonic()

    running = threading.Thread(target=up)
    running.start()
    wait_until(lambda: node(cluster, "gcu-node-1")["metadata"]["labels"].get(du.STATE_LABEL) == du.RESTARTING, 300,
               what="gcu-node-1 restarting its driver")
    deleted = time.monotonic()
    cluster.kubectl("delete", "node", "gcu-node-1", "--wait=false")
    running.join(600)
    assert not running.is_alive()
    # Not after the driver step's 120 s: the deletion is seen within a poll, the NotReady node is failed at once.
    assert result["done"] - deleted < 90, (result["done"] - deleted, result.get("error", "")[-6000:])
    assert "gcu-node-3 failed at ready check: the node is NotReady (KubeletNotReady: container runtime is down)" in result["error"]
    assert f"{du.LEFT}: gcu-node-1" in result["error"]
    notready = node(cluster, "gcu-node-3")
    assert notready["metadata"]["labels"][du.STATE_LABEL] == du.FAILED and not notready["spec"].get("unschedulable")
    done_before = node(cluster, "gcu-node-2")["metadata"]["resourceVersion"]

    # The kubelet is back and gcu-node-1 rejoins (a new node): refresh sees its missing labels, the next up finishes.
    make_ready(cluster, "gcu-node-3")
    cluster.add_nodes([NODES[0]])
    wait_settled(cluster, ["gcu-node-3"])   # the node controller's not-ready taints lifted, its agents Ready again
    stack.refresh(on_output=lambda _: None)
    up_converged(stack)
    out = outputs(stack)
    assert out["phase"] == "Running" and out["driverUpgrade"]["failed"] == {}
    assert "gcu-node-3" in out["driverUpgrade"]["upgraded"] and "gcu-node-2" not in out["driverUpgrade"]["upgraded"]
    assert node(cluster, "gcu-node-2")["metadata"]["resourceVersion"] == done_before
    for name in GCU_NODES:
        assert not node(cluster, name)["spec"].get("unschedulable"), name
    assert {p["spec"]["containers"][0]["image"] for p in driver_pods(cluster).values()} == {
        "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:5.0"}


def test_4d_with_rollback_a_node_whose_new_driver_fails_serves_on_the_old_one_and_the_next_up_retries_it_first(upgrade):
    stack, cluster, root, policy_config = upgrade
    # A taint the new driver does not tolerate and the agents do (added to their live DaemonSets, as an operator's
    # patch would be): the new driver pod cannot land on the node, its agents can come back.
    agents = json.loads(cluster.kubectl("get", "ds", "-n", "kube-system", "-l", "app.kubernetes.io/part-of=gcu-stack", "-o", "json").stdout)["items"]
    for agent in agents:
        if agent["metadata"]["name"] != "enflame-gcu-driver":
            cluster.kubectl("patch", "ds", agent["metadata"]["name"], "-n", "kube-system", "--type=json", "-p", json.dumps(
                [{"op": "add", "path": "/spec/template/spec/tolerations/-", "value": {"key": "gcu-test/broken", "operator": "Exists"}}]))
    wait_settled(cluster, GCU_NODES)
    first, second, third = wave_order(cluster, GCU_NODES)
    cluster.kubectl("taint", "node", second, "gcu-test/broken=true:NoSchedule")
    set_json_config(stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 20, "onFailure": "rollback"})
    set_json_config(stack, "spec", spec("6.0"))
    with pytest.raises(auto.CommandError) as caught:
        stack.up(on_output=lambda _: None)
    assert f"{second} failed at restart driver" in str(caught.value) and f"Rolled back: {second}" in str(caught.value)
    back = node(cluster, second)
    assert back["metadata"]["labels"][du.STATE_LABEL] == du.ROLLED_BACK and not back["spec"].get("unschedulable")
    pinned = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l", f"{du.ROLLBACK_POD_LABEL}={second}",
                                        "-o", "json").stdout)["items"]
    assert [p["spec"]["containers"][0]["image"] for p in pinned] == ["artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:5.0"]
    assert node(cluster, third)["metadata"]["labels"][du.STATE_LABEL] == du.DONE   # from 5.0: not started at 6.0
    preview = stack.preview(policy_packs=[str(root / "project" / "policies")], policy_pack_configs=[str(policy_config)])
    assert f"retried: {second} (rolled back after restart driver: no new driver pod" in preview.stdout, preview.stdout
    cluster.kubectl("taint", "node", second, "gcu-test/broken-")
    up_converged(stack)
    out = outputs(stack)
    assert out["driverUpgrade"]["upgraded"] == [second, third] and out["driverUpgrade"]["rolledBack"] == []
    assert out["phase"] == "Running"
    assert {p["spec"]["containers"][0]["image"] for p in driver_pods(cluster).values()} == {
        "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-driver:6.0"}
    assert json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l", du.ROLLBACK_POD_LABEL, "-o", "json").stdout)["items"] == []
    assert node(cluster, second)["metadata"]["labels"]["enflame.com/gcu.deploy.driver"] == "true"   # GcuNodes' value, as before


def test_5_destroy_leaves_no_cordon_label_or_annotation(upgrade):
    stack, cluster, _, _ = upgrade
    stack.destroy(on_output=lambda _: None)
    for name in GCU_NODES:
        meta = node(cluster, name)["metadata"]
        ours = [k for k in meta["labels"] if k.startswith("enflame.com/gcu.") and k != DRIVER_LABEL]
        assert not ours, meta["labels"]  # the driver label was the test's (the "pre-installed driver" mark)
        assert not [k for k in (meta.get("annotations") or {}) if "gcu" in k], meta.get("annotations")
        assert not node(cluster, name)["spec"].get("unschedulable")
    assert pending_tainted(cluster) == set()
