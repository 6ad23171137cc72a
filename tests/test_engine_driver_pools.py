"""Per-pool driver versions with the real engine on a real control plane (kwok GCU nodes): each pool's rollout moves
its nodes into its pool (drained, the old driver pod gone, then the pool's label) and its DaemonSet runs its version
there (the DaemonSet controller reads the selectors and the component's own DaemonSet's exclusion); a new version for
one pool previews and rolls out on that pool's nodes only; a relabelled node keeps its driver until the next `up`
moves it; a removed pool's nodes move back to the component's own driver; destroy leaves no label of ours.
"""

from __future__ import annotations

import json

import pytest
from driver_fixtures import CordonWatch, apply, gcu_job, wait_settled
from engine import GCU_NODE_LABELS, GCUS, engine_stack, node, outputs, set_json_config, up_converged
from harness import seed_spec

from components.names import DRIVER_POOL_LABEL
from components.providers import driver_rollout as du

# Outside CI's time budget: scripts/test-extended.sh runs this module (tests/conftest.py EXTENDED).
pytestmark = pytest.mark.extended

POOL = "gcu-test/pool"
REPO = "artifact.enflame.cn/galaxy_docker_hub/gcu"
POOL_OF = {"gcu-a-1": "a", "gcu-a-2": "a", "gcu-b-1": "b", "gcu-own-1": None, "gcu-own-2": None}
NODES = [(n, {**GCU_NODE_LABELS, **({POOL: p} if p else {})}, GCUS) for n, p in POOL_OF.items()] + [("cpu-node-1", {})]
OWN = sorted(n for n, p in POOL_OF.items() if p is None)
# A Ready driver (of whichever DaemonSet) and device plugin on each node.
AGENTS = ("app.kubernetes.io/component=driver", "app.kubernetes.io/name=enflame-gcu-k8s-plugin")


def spec(own: str, a: str, b: str) -> dict:
    pools = [{"name": "a", "nodeSelector": {POOL: "a"}, "version": a}] if a else []
    return seed_spec(**{"driver.notDeploy": False, "driver.version": own, "driver.pools": [
        *pools, {"name": "b", "nodeSelector": {POOL: "b"}, "version": b}]})


def pool_labels(cluster) -> dict[str, str]:
    return {n: node(cluster, n)["metadata"]["labels"].get(DRIVER_POOL_LABEL) for n in POOL_OF}


def driver_pods(cluster) -> dict[str, dict]:
    """node -> its live driver pod, whichever DaemonSet (the component's own or a pool's) it belongs to."""
    found = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-l", "app.kubernetes.io/component=driver",
                                       "-o", "json").stdout)["items"]
    return {p["spec"]["nodeName"]: p for p in found if not p["metadata"].get("deletionTimestamp")}


def images(cluster) -> dict[str, str]:
    return {node: pod["spec"]["containers"][0]["image"].rsplit("/", 1)[1] for node, pod in driver_pods(cluster).items()}


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-pools")
    with engine_stack(root, NODES, "pools") as engine:
        engine.stack.remove_config("gcu-stack:blueprint")
        set_json_config(engine.stack, "spec", spec("1.0", "a1", "b1"))
        set_json_config(engine.stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 20, "maxUnavailable": "100%", "maxParallel": 2})
        yield engine.stack, engine.cluster, root, engine.policy_config


def test_1_the_first_up_moves_each_pools_nodes_into_it_and_each_runs_its_own_version(pools):
    stack, cluster, root, policy_config = pools
    # Nothing deployed yet: the preview plans each pool's moves from the live nodes (no DaemonSet, no revision to read).
    text = stack.preview(policy_packs=[str(root / "project" / "policies")], policy_pack_configs=[str(policy_config)]).stdout
    assert "driver: not deployed yet" in text and "could not be read" not in text, text
    assert f"driver pool a: driver upgrade planned: the running driver → {REPO}/gcu-driver:a1, 2 of 2 GCU node(s)" in text, text
    assert "gcu-a-1 (moves from the own driver; no GCU pod to evict)" in text and "gcu-b-1 (moves from the own driver;" in text
    up_converged(stack)
    out = outputs(stack)
    assert out["phase"] == "Running", out
    assert images(cluster) == {"gcu-a-1": "gcu-driver:a1", "gcu-a-2": "gcu-driver:a1", "gcu-b-1": "gcu-driver:b1",
                               "gcu-own-1": "gcu-driver:1.0", "gcu-own-2": "gcu-driver:1.0"}
    assert pool_labels(cluster) == {**POOL_OF}
    report = out["driverUpgrade"]
    assert sorted(report["nodes"]) == OWN and report["upgraded"] == []
    assert sorted(report["pools"]["a"]["upgraded"]) == ["gcu-a-1", "gcu-a-2"] and report["pools"]["b"]["upgraded"] == ["gcu-b-1"]
    assert all(du.MOVE_ANNOTATION not in (node(cluster, n)["metadata"].get("annotations") or {}) for n in POOL_OF)
    apply(cluster, gcu_job("training", 4))
    wait_settled(cluster, list(POOL_OF), agents=AGENTS)


def test_2_a_new_version_for_one_pool_previews_and_rolls_out_on_that_pool_only(pools):
    stack, cluster, root, policy_config = pools
    before = {n: pod["metadata"]["uid"] for n, pod in driver_pods(cluster).items()}
    set_json_config(stack, "spec", spec("1.0", "a2", "b1"))
    preview = stack.preview(policy_packs=[str(root / "project" / "policies")], policy_pack_configs=[str(policy_config)])
    text = preview.stdout
    assert f"driver pool a: driver upgrade planned: {REPO}/gcu-driver:a1 → {REPO}/gcu-driver:a2, 2 of 2 GCU node(s)" in text, text
    assert "driver pool b: driver upgrade planned" not in text
    assert not any(line.lstrip().startswith("driver upgrade planned") for line in text.splitlines()), text
    with CordonWatch(cluster) as watch:
        up_converged(stack)
    assert 1 <= watch.most <= 2   # pool a's two nodes, at most maxParallel at once
    out = outputs(stack)
    report = out["driverUpgrade"]
    assert sorted(report["pools"]["a"]["upgraded"]) == ["gcu-a-1", "gcu-a-2"] and report["pools"]["a"]["failed"] == {}
    assert report["pools"]["b"]["upgraded"] == [] and report["upgraded"] == []
    assert set(report["pools"]["a"]["reports"]) == {"gcu-a-1", "gcu-a-2"}
    after = driver_pods(cluster)
    assert {n: after[n]["metadata"]["uid"] for n in ("gcu-b-1", *OWN)} == {n: before[n] for n in ("gcu-b-1", *OWN)}
    assert images(cluster)["gcu-a-1"] == images(cluster)["gcu-a-2"] == "gcu-driver:a2"
    assert out["phase"] == "Running"
    upgrade = [c for c in out["conditions"] if c["action"] == "upgrade"]
    assert upgrade and upgrade[0]["status"] == "success", out["conditions"]
    assert "pool a: driver upgraded on 2 node(s)" in upgrade[0]["message"], upgrade[0]["message"]


def test_3_a_node_relabelled_into_a_pool_keeps_its_driver_until_the_next_up_moves_it_through_the_safe_path(pools):
    stack, cluster, root, policy_config = pools
    wait_settled(cluster, list(POOL_OF), agents=AGENTS)
    before = driver_pods(cluster)["gcu-own-2"]["metadata"]["uid"]
    cluster.kubectl("label", "node", "gcu-own-2", f"{POOL}=b")
    preview = stack.preview(policy_packs=[str(root / "project" / "policies")], policy_pack_configs=[str(policy_config)])
    assert "driver pool b: driver upgrade planned:" in preview.stdout and "gcu-own-2 (moves from the own driver; " in preview.stdout, preview.stdout
    # Nothing swapped the driver by itself (the preview took seconds: the DaemonSet controller had time to).
    assert driver_pods(cluster)["gcu-own-2"]["metadata"]["uid"] == before
    up_converged(stack)
    report = outputs(stack)["driverUpgrade"]
    assert report["pools"]["b"]["upgraded"] == ["gcu-own-2"] and sorted(report["nodes"]) == ["gcu-own-1"]
    states = [s["state"] for s in report["pools"]["b"]["reports"]["gcu-own-2"]["states"]]
    assert du.CORDONED in states and du.EVICTING in states, states
    assert images(cluster)["gcu-own-2"] == "gcu-driver:b1" and pool_labels(cluster)["gcu-own-2"] == "b"


def test_4_a_removed_pool_moves_its_nodes_back_to_the_own_driver_and_its_daemonset_goes(pools):
    stack, cluster, _, _ = pools
    wait_settled(cluster, list(POOL_OF), agents=AGENTS)
    set_json_config(stack, "spec", spec("1.0", "", "b1"))
    up_converged(stack)
    out = outputs(stack)
    assert sorted(out["driverUpgrade"]["upgraded"]) == ["gcu-a-1", "gcu-a-2"] and sorted(out["driverUpgrade"]["pools"]) == ["b"]
    assert images(cluster)["gcu-a-1"] == images(cluster)["gcu-a-2"] == "gcu-driver:1.0"
    assert pool_labels(cluster)["gcu-a-1"] is None and pool_labels(cluster)["gcu-a-2"] is None
    assert cluster.kubectl("get", "ds", "-n", "kube-system", "enflame-gcu-driver-a", check=False).returncode != 0
    assert out["phase"] == "Running"


def test_5_destroy_leaves_no_pool_label_or_annotation_of_ours(pools):
    stack, cluster, _, _ = pools
    stack.destroy(on_output=lambda _: None)
    for name in POOL_OF:
        meta = node(cluster, name)["metadata"]
        assert DRIVER_POOL_LABEL not in meta["labels"] and du.MOVE_ANNOTATION not in (meta.get("annotations") or {}), meta
        assert not node(cluster, name)["spec"].get("unschedulable")
