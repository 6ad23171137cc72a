"""Per-pool driver versions (spec.driver.pools): what the program declares for them, what it refuses, how a rollout
plans the nodes that move into its pool.

Each pool gets its own OnDelete DaemonSet and rollout. A DaemonSet selects the nodes its pool's rollout moved in (the
driver-pool label, set once the node is drained); the component's own DaemonSet keeps off them. Overlapping pools are
refused naming both. That the DaemonSet controller reads these selectors as meant, and that each pool's rollout
touches only its own nodes, is proven on a real control plane (test_engine_driver_pools.py).
"""

from __future__ import annotations

from harness import DELETE, daemonsets, fails, pod_spec, run_program, seed_spec

from components.names import DRIVER_POOL_LABEL
from components.providers.driver_rollout import NodeFacts, describe, in_pool, plan

POOL = "gcu-test/pool"
DRIVER_REPO = "artifact.enflame.cn/galaxy_docker_hub/gcu"


def spec(pools, **changes) -> dict:
    return seed_spec(**{"driver.notDeploy": False, "driver.version": "1.0", "driver.pools": pools, **changes})


def terms(daemonset) -> list[list[tuple]]:
    """Each node-selector term of a DaemonSet's pods as (key, operator, values), without the deploy-label ones."""
    found = pod_spec(daemonset)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [[(e["key"], e["operator"], e.get("values")) for e in t["matchExpressions"] if not e["key"].startswith("enflame.com/gcu.deploy")]
            for t in found]


def test_each_pool_gets_its_own_daemonset_image_and_rollout_on_the_nodes_moved_into_it():
    run = run_program({"spec": spec([
        {"name": "a", "nodeSelector": {POOL: "a"}, "version": "2.0"},
        {"name": "b", "nodeSelector": {POOL: "b", "zone": "z1"}, "repository": "registry.example.com/gcu"},
    ])})
    found = {name: ds for name, ds in daemonsets(run).items() if name.startswith("enflame-gcu-driver")}
    assert sorted(found) == ["enflame-gcu-driver", "enflame-gcu-driver-a", "enflame-gcu-driver-b"]
    own, a, b = found["enflame-gcu-driver"], found["enflame-gcu-driver-a"], found["enflame-gcu-driver-b"]
    # A pool's unset fields are the component's: pool a changes the version only, pool b the repository only.
    assert pod_spec(own)["containers"][0]["image"] == f"{DRIVER_REPO}/gcu-driver:1.0"
    assert pod_spec(a)["containers"][0]["image"] == f"{DRIVER_REPO}/gcu-driver:2.0"
    assert pod_spec(b)["containers"][0]["image"] == "registry.example.com/gcu/gcu-driver:1.0"
    # Not the pool's own labels: relabelling a node must not swap its driver under a job; its rollout moves it.
    assert pod_spec(a)["nodeSelector"] == {"enflame.com/gcu.present": "true", DRIVER_POOL_LABEL: "a"}
    assert pod_spec(b)["nodeSelector"] == {"enflame.com/gcu.present": "true", DRIVER_POOL_LABEL: "b"}
    assert all(ds.inputs["spec"]["updateStrategy"] == {"type": "OnDelete"} for ds in found.values())
    assert terms(own) == [[(DRIVER_POOL_LABEL, "DoesNotExist", None)]]
    assert terms(a) == [[]] and terms(b) == [[]]
    # Logical names stay stable: the component's own keeps its URN; each pool's is named after the pool.
    assert (own.name, a.name, b.name) == ("driver-daemonset", "driver-daemonset-pool-a", "driver-daemonset-pool-b")
    rollouts = {r.name: r.inputs for r in run.registrations if r.type.endswith("gcu:DriverUpgrade")}
    assert sorted(rollouts) == ["driver-upgrade", "driver-upgrade-a", "driver-upgrade-b"]
    assert rollouts["driver-upgrade-a"]["daemonSet"] == "enflame-gcu-driver-a"
    moving = {"holdLabel": "enflame.com/gcu.deploy.driver", "driverPods": "app.kubernetes.io/component=driver,app.kubernetes.io/part-of=gcu-stack"}
    assert rollouts["driver-upgrade-a"]["pool"] == {"name": "a", "nodeSelector": {POOL: "a"}, "otherPools": [], **moving}
    assert rollouts["driver-upgrade"]["pool"] == {"name": "", "nodeSelector": {},
                                                  "otherPools": [{POOL: "a"}, {POOL: "b", "zone": "z1"}], **moving}
    # The toolkit waits for every pool's rollout, not only the component's own.
    toolkit = next(r for r in run.k8s() if r.inputs["kind"] == "DaemonSet" and r.inputs["metadata"]["labels"]["app.kubernetes.io/component"] == "toolkit")
    upgrade_urns = {r.urn for r in run.registrations if r.type.endswith("gcu:DriverUpgrade")}
    assert upgrade_urns <= set(toolkit.dependencies), toolkit.dependencies
    report = run.outputs["driverUpgrade"]
    assert sorted(report["pools"]) == ["a", "b"] and report["pools"]["a"]["upgraded"] == []


def test_without_pools_the_driver_and_its_rollout_are_as_before():
    run = run_program({"spec": spec(DELETE)})
    assert [n for n in daemonsets(run) if n.startswith("enflame-gcu-driver")] == ["enflame-gcu-driver"]
    rollout = next(r for r in run.registrations if r.type.endswith("gcu:DriverUpgrade"))
    assert rollout.inputs.get("pool") is None and "pools" not in run.outputs["driverUpgrade"]
    assert terms(daemonsets(run)["enflame-gcu-driver"]) == [[]]


def test_overlapping_pools_are_refused_naming_both_and_a_node_in_both():
    fails(
        {"spec": spec([{"name": "fast", "nodeSelector": {"zone": "z1"}}, {"name": "new", "nodeSelector": {"gen": "t20"}}])},
        "spec.driver.pools", "pools[0] ('fast') and pools[1] ('new') overlap", "a node labelled gen=t20, zone=z1 is in both",
    )
    fails({"spec": spec([{"name": "a", "nodeSelector": {POOL: "a"}}, {"name": "a", "nodeSelector": {POOL: "b"}}])},
          "'a' is already the name of pools[0]")


def test_a_pool_needs_a_name_that_can_suffix_a_workload_and_a_node_selector():
    fails({"spec": spec([{"name": "Pool_A", "nodeSelector": {POOL: "a"}}])}, "spec.driver.pools[0].name", "'Pool_A'")
    fails({"spec": spec([{"name": "a", "nodeSelector": {}}])}, "spec.driver.pools[0].nodeSelector")
    fails({"spec": spec([{"name": "a"}])}, "spec.driver.pools[0].nodeSelector")
    fails({"spec": spec([{"name": "a", "nodeSelector": {POOL: "a"}, "notDeploy": True}])}, "spec.driver.pools[0].notDeploy")


def test_an_empty_pools_list_keeps_the_own_daemonset_off_nodes_a_removed_pool_still_holds():
    run = run_program({"spec": spec([])})
    assert [n for n in daemonsets(run) if n.startswith("enflame-gcu-driver")] == ["enflame-gcu-driver"]
    assert terms(daemonsets(run)["enflame-gcu-driver"]) == [[(DRIVER_POOL_LABEL, "DoesNotExist", None)]]
    rollout = next(r for r in run.registrations if r.type.endswith("gcu:DriverUpgrade"))
    assert rollout.inputs["pool"]["name"] == "" and rollout.inputs["pool"]["otherPools"] == []


def test_a_node_moving_into_the_pool_takes_the_full_path_first_and_the_preview_says_from_where():
    facts = [
        NodeFacts("n1", driver_revision=None, moving_from=""),                   # the own driver's, no pod of the pool's yet
        NodeFacts("n2", driver_revision="r2", labels={DRIVER_POOL_LABEL: "a"}),  # in the pool already, current
        NodeFacts("n3", driver_revision=None, moving_from="b", gcu_pods=["default/job-1"]),
        NodeFacts("n4", driver_revision=None),                                    # in the pool, no driver pod: skipped
    ]
    the_plan = plan(facts, "r2", 1, "100%")
    assert the_plan.nodes == ["n1", "n3"] and the_plan.current == ["n2"] and list(the_plan.skipped) == ["n4"]
    assert the_plan.moves == {"n1": "", "n3": "b"} and the_plan.evictions["n3"] == ["default/job-1"]
    text = "\n".join(describe(the_plan, "gcu-driver:a2", [], 1, "100%"))
    assert "wave 1: n1 (moves from the own driver; no GCU pod to evict)" in text, text
    assert "wave 2: n3 (moves from pool b's driver; evicts default/job-1)" in text, text


def test_a_node_is_in_the_pool_its_labels_match_and_the_own_daemonset_has_the_nodes_of_no_pool():
    own = {"name": "", "nodeSelector": {}, "otherPools": [{POOL: "a"}, {POOL: "b", "zone": "z1"}]}
    assert in_pool({POOL: "c"}, own) and in_pool({POOL: "b"}, own) and in_pool({}, own)
    assert not in_pool({POOL: "a"}, own) and not in_pool({POOL: "b", "zone": "z1"}, own)
    pool_b = {"name": "b", "nodeSelector": {POOL: "b", "zone": "z1"}, "otherPools": []}
    assert in_pool({POOL: "b", "zone": "z1", "x": "y"}, pool_b) and not in_pool({POOL: "b"}, pool_b)
    assert in_pool({"anything": "x"}, None)
