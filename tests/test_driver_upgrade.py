"""The driver rollout (components/providers/driver_rollout.py) against a real kube-apiserver with kwok nodes.

The cluster carries what the stack would have deployed on GCU nodes that advertise
`enflame.com/gcu`: the driver DaemonSet (OnDelete) and a device plugin, GCU jobs with a
PodDisruptionBudget and ordinary pods. A new driver image then rolls out node by node.
"""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
from driver_fixtures import (
    CordonWatch,
    all_ready,
    apply,
    gcu_job,
    make_not_ready,
    make_ready,
    moved_once,
    names,
    nodes_json,
    ordinary,
    pending_tainted,
    pods,
    uids,
    wait_settled,
    wave_order,
)
from engine import node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from realnode_fixtures import wait_until

from components.catalog import BY_KEY
from components.manifests import workload_manifest
from components.model import PodAdditions
from components.providers import driver_prepull as prepull
from components.providers import driver_rollout as du
from components.providers.install_key import install_key
from components.providers.node_changes import NodeChanges
from components.resolve import resolve
from components.spec import BaseFields

GCU = {"feature.node.kubernetes.io/pci-1e36.present": "true", "enflame.com/gcu.present": "true"}
NODES = [(f"gcu-node-{i}", dict(GCU), {"capacity": {"enflame.com/gcu": "4"}}) for i in range(1, 5)] + [("cpu-node-1", {})]
GCU_NODES = [n for n, *_ in NODES if n.startswith("gcu")]
ROLLBACK = {"holdLabel": "enflame.com/gcu.deploy.driver"}   # what the step gives with driverUpgrade.onFailure: rollback


def resolved(key: str, **spec):
    return resolve(BY_KEY[key], BaseFields.model_validate(spec), f"spec.{key}")


def manifest(key: str, **spec) -> dict:
    component = resolved(key, **spec)
    (workload,) = component.workloads
    return workload_manifest(component, workload, "enflame-gcu-resource", PodAdditions())


def props(cluster, **overrides) -> dict:
    values = {
        "daemonSet": "enflame-gcu-driver",
        "namespace": "kube-system",
        "template": "t",
        "image": "gcu-driver:2.0",
        "nodes": list(GCU_NODES),
        "operands": ["devicePlugin"],
        "resources": ["enflame.com/gcu", "enflame.com/gcu-memory"],
        "maxParallel": 1,
        "maxUnavailable": "50%",
        "waitForCompletion": {"selector": "", "timeoutSeconds": 0},
        "evictionTimeoutSeconds": 30,
        "drain": {"enabled": False, "timeoutSeconds": 30},
        "driverReadyTimeoutSeconds": 30,
        "operandReadyTimeoutSeconds": 120,  # simulated pods turn Ready late on a loaded CI machine
        "validation": None,
        "kubeconfig": cluster.kubeconfig,
        "context": None,
    }
    values.update(overrides)
    return values


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from devtools.localcluster import LocalCluster

    with LocalCluster(tmp_path_factory.mktemp("driver-upgrade"), nodes=NODES, audit=False) as running:
        apply(running, [manifest("driver", version="1.0"), manifest("devicePlugin")])
        wait_until(lambda: all_ready(running, "app.kubernetes.io/name=enflame-gcu-driver", 4, "kube-system"), 60, what="driver pods")
        wait_until(lambda: all_ready(running, "app.kubernetes.io/name=enflame-gcu-k8s-plugin", 4, "kube-system"), 60, what="plugin pods")
        apply(running, [*gcu_job("training", 2), ordinary("web")])
        wait_until(lambda: all_ready(running, "app=training", 2) and all_ready(running, "app=web", 4), 60, what="workloads")
        yield running


@pytest.fixture
def settled_cluster(cluster):
    """The module's cluster once what the test before left settling has settled: a rollout test plans from it."""
    wait_settled(cluster, GCU_NODES)
    return cluster


@pytest.mark.usefixtures("settled_cluster")
def test_the_plan_in_waves_with_skips_and_the_worst_case(cluster):
    api = du.Cluster(props(cluster))
    facts = api.facts(GCU_NODES)
    revision = api.current_revision()
    # Nothing to do while every driver pod runs the current revision.
    assert du.plan(facts, revision, 1, "50%").waves == []
    pretend = du.plan(facts, "a-new-revision", 2, "50%")
    # Nodes without GCU jobs first: the jobs evicted later have upgraded nodes to go to.
    assert pretend.nodes == wave_order(cluster, GCU_NODES) and all(len(w) <= 2 for w in pretend.waves)
    assert pretend.most_unavailable <= 2
    lines = du.describe(pretend, "gcu-driver:2.0", ["gcu-driver:1.0"], 2, "50%")
    assert lines[0].startswith("driver upgrade planned: gcu-driver:1.0 → gcu-driver:2.0, 4 of 4 GCU node(s)")
    assert any("training-" in line for line in lines)  # the GCU pods each wave evicts are named
    assert any(du.PENDING_TAINT["key"] + ":PreferNoSchedule" in line for line in lines)


@pytest.mark.usefixtures("settled_cluster")
def test_a_validation_pod_of_gcu_stack_is_no_job_to_move(cluster):
    # Under load the stack's validation pods (one GCU each, on every GCU node) can still run when a rollout plans:
    # counted as jobs, they reordered the waves and would have been evicted.
    check = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gcu-validate-probe", "namespace": "kube-system",
             "labels": {"app.kubernetes.io/name": "gcu-validation", "app.kubernetes.io/part-of": "gcu-stack"}},
             "spec": {"nodeName": "gcu-node-1", "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
                      "containers": [{"name": "check", "image": "check:1", "resources": {"limits": {"enflame.com/gcu": "1"}}}]}}
    apply(cluster, [check])
    try:
        wait_until(lambda: all_ready(cluster, "app.kubernetes.io/name=gcu-validation", 1, "kube-system"), 60, what="the check pod")
        api = du.Cluster(props(cluster))
        assert not any(p["metadata"]["name"] == "gcu-validate-probe" for p in api.gcu_pods("gcu-node-1"))
    finally:
        cluster.kubectl("delete", "pod", "gcu-validate-probe", "-n", "kube-system", "--wait=true")


def test_a_rollouts_waits_wake_on_a_change_on_their_node_seen_by_a_watch(cluster):
    api = du.Cluster(props(cluster)).api
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wake-probe", "namespace": "default"},
             "spec": {"nodeName": "gcu-node-2", "containers": [{"name": "main", "image": "probe:1"}]}}
    try:
        with NodeChanges(api) as changes:
            on_pod_node, on_labelled = changes.seen("gcu-node-2"), changes.seen("gcu-node-1")
            anywhere = changes.seen(None)
            apply(cluster, [probe])
            changes.wait("gcu-node-2", on_pod_node, 60)   # a pod bound to the node: a change on that node
            assert changes.seen("gcu-node-2") > on_pod_node
            cluster.kubectl("label", "node", "gcu-node-1", "gcu-test/touched=1", "--overwrite")
            changes.wait("gcu-node-1", on_labelled, 60)   # the node object itself
            assert changes.seen("gcu-node-1") > on_labelled
            assert changes.seen(None) >= anywhere + 2
        started = time.monotonic()
        changes.wait("gcu-node-3", changes.seen("gcu-node-3"), 60)   # closed: nothing waits on it any more
        assert time.monotonic() - started < 30
    finally:
        cluster.kubectl("delete", "pod", "wake-probe", "--wait=true", "--ignore-not-found")
        cluster.kubectl("label", "node", "gcu-node-1", "gcu-test/touched-")


def _scheduled(monkeypatch, waves: list, blocks: dict, **limits) -> tuple[list, du.Progress]:
    """Run `waves` with NodeUpgrade.run replaced: each node records its start and end; a node in `blocks` ends only once
    the node named there has started (or after 30 s). What happened, in order, and the progress."""
    events, lock, started = [], threading.Lock(), {n: threading.Event() for wave in waves for n in wave}

    def run(self):
        with lock:
            events.append(("start", self.node))
        started[self.node].set()
        if self.node in blocks:
            started[blocks[self.node]].wait(30)
        with lock:
            events.append(("end", self.node))

    monkeypatch.setattr(du.NodeUpgrade, "run", run)
    fake = SimpleNamespace(props={}, clock=time.monotonic)
    return events, du._waves(fake, waves, "rev", lambda _: None, **limits)


def test_a_node_starts_as_soon_as_one_before_it_finishes_not_its_whole_wave(monkeypatch):
    # a is slow: it ends only once c has started. Wave by wave, c would wait for a (and a for c: 30 s).
    events, progress = _scheduled(monkeypatch, [["a", "b"], ["c", "d"]], {"a": "c"}, parallel=2, room=2)
    assert events.index(("start", "c")) < events.index(("end", "a"))
    assert events.index(("end", "b")) < events.index(("start", "c"))   # no more than two at once
    assert progress.done == ["a", "b", "c", "d"] and progress.failed == {}   # reported in the plan's order
    running = most = 0
    for kind, _ in events:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most == 2


def test_a_node_that_makes_one_more_unavailable_waits_for_room_one_already_unschedulable_does_not(monkeypatch):
    # room 1: y waits for x to end; f (unschedulable before the rollout) runs beside x.
    events, progress = _scheduled(monkeypatch, [["x", "f"], ["y"]], {"x": "f"}, parallel=2, room=1, free=frozenset({"f"}))
    assert events.index(("start", "f")) < events.index(("end", "x")) < events.index(("start", "y"))
    assert progress.done == ["x", "f", "y"]


def test_waves_resume_first_then_nodes_without_gcu_jobs_each_by_name():
    facts = [
        du.NodeFacts("a", driver_revision="rev-1", gcu_pods=["default/job-1"]),
        du.NodeFacts("b", driver_revision="rev-1"),
        du.NodeFacts("c", driver_revision="rev-1", unschedulable=True, annotations={du.CORDONED_ANNOTATION: "true"},
                     gcu_pods=["default/job-2"]),
        du.NodeFacts("d", driver_revision="rev-1"),
    ]
    assert du.plan(facts, "rev-2", 1, "100%").nodes == ["c", "b", "d", "a"]


def test_the_preview_says_how_many_nodes_run_at_once_within_the_budget():
    facts = [du.NodeFacts(name, driver_revision="rev-1") for name in ("a", "b", "c", "d")]
    # maxParallel 2, but a budget of one node: one at a time, as the rollout runs them (the walk-through showed "2").
    lines = du.describe(du.plan(facts, "rev-2", 2, 1), "gcu-driver:2.0", ["gcu-driver:1.0"], 2, 1)
    assert "  up to 1 node(s) at once, in this order: each starts as soon as one before it finishes, not when its whole wave has" in lines
    # A node unschedulable before the rollout takes none of the budget: it may run beside the one node that does.
    facts[0].unschedulable = True
    lines = du.describe(du.plan(facts, "rev-2", 2, 2), "gcu-driver:2.0", ["gcu-driver:1.0"], 2, 2)
    assert any(line.startswith("  up to 2 node(s) at once") for line in lines), lines


def test_a_prepull_pod_runs_each_image_of_the_revision_once_and_tells_pulled_from_an_image_error():
    template = {"spec": {"imagePullSecrets": [{"name": "registry"}],
                         "initContainers": [{"name": "init", "image": "drv:2.0", "imagePullPolicy": "Always"}],
                         "containers": [{"name": "driver", "image": "drv:2.0"}, {"name": "helper", "image": "tools:1"}]}}
    pod = prepull.prepull_pod(template, "enflame-gcu-driver", "kube-system", "6f7c9", "gcu-node-1")
    spec = pod["spec"]
    assert [(c["image"], c["imagePullPolicy"]) for c in spec["containers"]] == [("drv:2.0", "Always"), ("tools:1", "IfNotPresent")]
    assert spec["nodeName"] == "gcu-node-1" and spec["tolerations"] == [{"operator": "Exists"}] and spec["restartPolicy"] == "Never"
    assert spec["imagePullSecrets"] == [{"name": "registry"}] and all("resources" not in c for c in spec["containers"])
    assert pod["metadata"]["labels"] == {prepull.PREPULL_LABEL: "enflame-gcu-driver", du.REVISION_LABEL: "6f7c9",
                                         du.PART_OF_LABEL: du.PART_OF}
    assert len(prepull.pod_name("d" * 200, "6f7c9", "n" * 100)) == 253

    def status(*states, phase="Pending"):
        return {**pod, "status": {"phase": phase, "containerStatuses": [
            {"name": f"pull-{i}", "image": c["image"], "state": state} for i, (c, state) in enumerate(zip(spec["containers"], states, strict=True))]}}

    creating = {"waiting": {"reason": "ContainerCreating"}}
    assert prepull.pull_state(pod)[0] == "pulling"   # nothing reported by the kubelet yet
    assert prepull.pull_state(status({"running": {}}, creating)) == ("pulling", "tools:1")
    assert prepull.pull_state(status({"terminated": {"exitCode": 0}}, {"running": {}})) == ("pulled", "")
    # An image without sh fails to start: its image is on the node all the same.
    assert prepull.pull_state(status({"waiting": {"reason": "RunContainerError"}}, {"running": {}}))[0] == "pulled"
    state, why = prepull.pull_state(status({"running": {}}, {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}))
    assert state == "error" and why == "tools:1: ImagePullBackOff (Back-off pulling)"


def test_a_node_without_a_driver_pod_is_skipped_unless_a_rollout_is_still_at_it():
    # The CI failure this pins: a node that failed at `restart driver` (its old pod deleted) was skipped by the next run
    # when its new pod had not been created yet, and never upgraded.
    facts = [
        du.NodeFacts("opted-out"),
        du.NodeFacts("failed-here", labels={du.STATE_LABEL: du.FAILED}),
        du.NodeFacts("upgraded-before", labels={du.STATE_LABEL: du.DONE}),
    ]
    planned = du.plan(facts, "rev-2", 1, "100%")
    assert planned.nodes == ["failed-here"]
    assert sorted(planned.skipped) == ["opted-out", "upgraded-before"]


@pytest.mark.usefixtures("settled_cluster")
def test_rollout_moves_only_gcu_pods_one_node_at_a_time_and_restores_every_node(cluster):
    ordinary_before = uids(cluster, "app=web")
    cluster.kubectl("cordon", "gcu-node-3")  # an operator's cordon: it stays after the upgrade
    cluster.kubectl("label", "node", "gcu-node-4", f"{du.SKIP_LABEL}=true")
    order = wave_order(cluster, GCU_NODES[:3])
    jobs_before = names(cluster, "app=training")
    apply(cluster, [manifest("driver", version="2.0")])
    tainted_after: list = []   # after each node: the nodes that still repel GCU jobs
    pulled_first: dict = {}   # when the pre-pull ends: its pods' states by node, and the nodes gcu-stack had cordoned

    def after_each_node(message: str) -> None:
        if message.startswith("the new driver's images are on"):
            pulled_first["pods"] = {p["spec"]["nodeName"]: prepull.pull_state(p)[0]
                                    for p in pods(cluster, prepull.selector("enflame-gcu-driver"), "kube-system")}
            pulled_first["cordoned"] = {n["metadata"]["name"] for n in nodes_json(cluster)
                                        if du.CORDONED_ANNOTATION in (n["metadata"].get("annotations") or {})}
        if message.endswith(": driver upgraded"):
            tainted_after.append(pending_tainted(cluster))
            # Done means schedulable as the scheduler sees it: the node controller's cordon taint is gone too.
            done = node(cluster, message.split(":")[0])
            assert du.UNSCHEDULABLE_TAINT not in [t["key"] for t in done["spec"].get("taints") or []] or done["spec"].get("unschedulable")

    with CordonWatch(cluster) as watch:
        outputs = du.rollout(props(cluster), log=after_each_node)
    assert watch.most == 1  # maxParallel 1: never two nodes cordoned by gcu-stack at once
    assert outputs["upgraded"] == order
    # Before the first cordon, the kubelet of every node to upgrade had started a pod of the new images; none is left.
    assert pulled_first == {"pods": {n: "pulled" for n in order}, "cordoned": set()}
    assert pods(cluster, prepull.selector("enflame-gcu-driver"), "kube-system") == []
    # Until its turn each node repels new GCU pods softly; the skipped node never does; none does afterwards.
    assert tainted_after == [set(order[i + 1:]) for i in range(len(order))]
    assert pending_tainted(cluster) == set()
    moved_once(outputs["reports"], jobs_before)   # an evicted job went to an upgraded node, not to one evicted later
    assert outputs["skipped"] == {"gcu-node-4": f"label {du.SKIP_LABEL}=true"}
    assert outputs["failed"] == {}
    revision = outputs["revision"]
    drivers = {p["spec"]["nodeName"]: p for p in pods(cluster, "app.kubernetes.io/name=enflame-gcu-driver", "kube-system")}
    for name in ("gcu-node-1", "gcu-node-2", "gcu-node-3"):
        assert drivers[name]["metadata"]["labels"][du.REVISION_LABEL] == revision
        meta = node(cluster, name)["metadata"]
        assert meta["labels"][du.STATE_LABEL] == du.DONE
        assert du.PAUSED_ANNOTATION not in (meta.get("annotations") or {})
        assert "enflame.com/gcu.deploy.devicePlugin" not in meta["labels"]  # it had none: none afterwards
    assert drivers["gcu-node-4"]["metadata"]["labels"][du.REVISION_LABEL] != revision  # skipped: left as it was
    assert not node(cluster, "gcu-node-1")["spec"].get("unschedulable")
    assert node(cluster, "gcu-node-3")["spec"]["unschedulable"] is True  # was cordoned before: still is
    assert uids(cluster, "app=web") == ordinary_before  # pods without a GCU were not touched
    wait_until(lambda: all_ready(cluster, "app=training", 2), 60, what="GCU jobs back")
    wait_until(lambda: all_ready(cluster, "app.kubernetes.io/name=enflame-gcu-k8s-plugin", 4, "kube-system"), 60, what="plugins back")
    cluster.kubectl("uncordon", "gcu-node-3")
    cluster.kubectl("label", "node", "gcu-node-4", f"{du.SKIP_LABEL}-")


@pytest.mark.usefixtures("settled_cluster")
def test_an_image_a_node_cannot_pull_stops_the_rollout_before_anything_is_cordoned(cluster, monkeypatch):
    # A fifth GCU node whose kubelet is the test's (kwok does not manage it): it runs its driver pod, and for the
    # pre-pull pod it reports an image error, as a kubelet does for a tag the registry does not have (it retries, the
    # error stays).
    from devtools.localcluster import KWOK_ANNOTATION

    manual = "gcu-node-manual"
    monkeypatch.setattr(prepull, "IMAGE_ERROR_GRACE_SECONDS", 3.0)
    jobs = uids(cluster, "app=training")
    obj = cluster.node_object(manual, dict(GCU), {"capacity": {"enflame.com/gcu": "4"}})
    del obj["metadata"]["annotations"][KWOK_ANNOTATION]
    status = obj.pop("status")
    cluster.api.post("/api/v1/nodes", obj)
    stop = threading.Event()

    def kubelet() -> None:
        while not stop.is_set():
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            cluster.api.patch(f"/api/v1/nodes/{manual}/status", {"status": {**status, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now}]}})
            for pod in json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json",
                                                  f"--field-selector=spec.nodeName={manual}").stdout)["items"]:
                if (pod.get("status") or {}).get("containerStatuses") or pod["metadata"].get("deletionTimestamp"):
                    continue
                pulling = prepull.PREPULL_LABEL in pod["metadata"]["labels"]
                state = {"waiting": {"reason": "ErrImagePull", "message": "failed to pull and unpack image: not found"}} \
                    if pulling else {"running": {"startedAt": now}}
                statuses = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": not pulling, "restartCount": 0,
                             "started": not pulling, "state": state} for c in pod["spec"]["containers"]]
                ready = [{"type": "Ready", "status": "False" if pulling else "True"}]
                cluster.api.patch(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/status",
                                  {"status": {"phase": "Pending" if pulling else "Running", "conditions": ready,
                                              "containerStatuses": statuses}})
            time.sleep(0.3)

    player = threading.Thread(target=kubelet, daemon=True)
    player.start()
    try:
        wait_until(lambda: manual in du.Cluster(props(cluster)).driver_pods(manual), 60, what=f"a driver pod on {manual}")
        apply(cluster, [manifest("driver", version="2.5")])
        with pytest.raises(RuntimeError) as caught:
            du.rollout(props(cluster, nodes=[*GCU_NODES, manual]))
        message = str(caught.value)
        assert f"could not be pulled, so no node was cordoned: {manual}: artifact.enflame.cn" in message, message
        assert "ErrImagePull (failed to pull and unpack image: not found)" in message and "gcu-node-1" not in message
        for name in [*GCU_NODES, manual]:   # nothing was done on any node: no cordon, no state, no taint, no pod moved
            meta = node(cluster, name)
            assert not meta["spec"].get("unschedulable")
            assert meta["metadata"]["labels"].get(du.STATE_LABEL) in (None, du.DONE)
        assert pending_tainted(cluster) == set() and uids(cluster, "app=training") == jobs
        wait_until(lambda: not pods(cluster, prepull.selector("enflame-gcu-driver"), "kube-system"), 30,
                   what="the pre-pull pods deleted")
    finally:
        stop.set()
        player.join()
        cluster.kubectl("delete", "node", manual, "--wait=false")
        cluster.kubectl("delete", "pods", "-A", f"--field-selector=spec.nodeName={manual}", "--force", "--grace-period=0")
        apply(cluster, [manifest("driver", version="2.0")])   # back to the revision the nodes run


@pytest.mark.usefixtures("settled_cluster")
def test_a_node_whose_new_driver_never_gets_ready_halts_the_rollout_and_the_next_run_resumes(cluster):
    # The new driver pod cannot land on the second node of the plan (a taint it does not tolerate): its upgrade fails.
    first, second, *later = wave_order(cluster, GCU_NODES)
    cluster.kubectl("taint", "node", second, "gcu-test/broken=true:NoSchedule")
    apply(cluster, [manifest("driver", version="3.0")])
    with pytest.raises(RuntimeError) as caught:
        du.rollout(props(cluster, driverReadyTimeoutSeconds=10))
    message = str(caught.value)
    assert f"{second} failed at restart driver" in message and f"not started: {', '.join(later)}" in message
    broken = node(cluster, second)
    assert broken["spec"]["unschedulable"] is True and broken["metadata"]["labels"][du.STATE_LABEL] == du.FAILED
    assert "no new driver pod" in broken["metadata"]["annotations"][du.REASON_ANNOTATION]
    for name in later:  # untouched
        assert node(cluster, name)["metadata"]["labels"].get(du.STATE_LABEL) in (None, du.DONE)
        assert not node(cluster, name)["spec"].get("unschedulable")
    assert pending_tainted(cluster) == set()  # a stopped rollout leaves no node repelling jobs
    done_first = node(cluster, first)["metadata"]["resourceVersion"]
    cluster.kubectl("taint", "node", second, "gcu-test/broken-")
    outputs = du.rollout(props(cluster))
    assert outputs["upgraded"][0] == second and sorted(outputs["upgraded"]) == sorted([second, *later])  # failed node first
    assert node(cluster, first)["metadata"]["resourceVersion"] == done_first  # no repeat
    assert all(not node(cluster, n)["spec"].get("unschedulable") for n in GCU_NODES)


@pytest.mark.usefixtures("settled_cluster")
def test_a_change_to_nothing_the_driver_installs_restarts_its_pods_without_cordon_or_eviction(cluster):
    jobs = uids(cluster, "app=training")
    api = du.Cluster(props(cluster))
    old_pods = {name: pod["metadata"]["uid"] for name, pod in api.driver_pods().items()}
    cosmetic = manifest("driver", version="3.0", imagePullPolicy="Always")   # same image: nothing installed changes
    apply(cluster, [cosmetic])
    revision = api.current_revision()
    # The template the stack applies and the revision the API server stored (defaults filled in) hash alike.
    assert api.install_keys()[revision] == install_key(cosmetic["spec"]["template"])
    planned = du.plan(api.facts(GCU_NODES, install_key(cosmetic["spec"]["template"])), revision, 1, "50%")
    assert planned.waves == [] and planned.restarts == [GCU_NODES[:2], GCU_NODES[2:]]   # batches of maxUnavailable: 2
    lines = du.describe(planned, "gcu-driver:3.0", ["gcu-driver:3.0"], 1, "50%")
    assert lines[0].startswith("driver restart only: 4 of 4 GCU node(s), in 2 batch(es)") and "  batch 1: gcu-node-1, gcu-node-2" in lines
    tainted: list = []
    with CordonWatch(cluster) as watch:
        outputs = du.rollout(props(cluster), log=lambda message: tainted.append(pending_tainted(cluster)))
    assert watch.most == 0 and tainted and all(t == set() for t in tainted)   # no cordon, no taint, at any point
    assert outputs["restarted"] == GCU_NODES and outputs["upgraded"] == [] and outputs["failed"] == {}
    for name, report in outputs["reports"].items():
        assert report["result"] == "restarted" and report["evicted"] == [], (name, report)
        assert [s["state"] for s in report["states"]] == [du.RESTART_REQUIRED, du.RESTARTING, du.DONE], (name, report)
    assert uids(cluster, "app=training") == jobs   # every GCU job kept running where it was
    drivers = api.driver_pods()
    for name in GCU_NODES:
        assert drivers[name]["metadata"]["uid"] != old_pods[name], name   # replaced: it carries the new template
        assert drivers[name]["metadata"]["labels"][du.REVISION_LABEL] == revision
        assert drivers[name]["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    assert "restarted only (nothing installed changed) on 4 node(s)" in outputs["message"]
    # A new version next to it installs something else: the full path, every node.
    upgrade = manifest("driver", version="3.1", imagePullPolicy="Always")
    assert install_key(upgrade["spec"]["template"]) != install_key(cosmetic["spec"]["template"])


@pytest.mark.usefixtures("settled_cluster")
def test_a_rollout_paused_by_its_window_leaves_the_rest_untouched_and_the_next_one_continues(cluster, monkeypatch):
    apply(cluster, [manifest("driver", version="3.2")])
    api = du.Cluster(props(cluster))
    order = wave_order(cluster, GCU_NODES)
    before = {name: pod["metadata"]["uid"] for name, pod in api.driver_pods().items()}
    asked: list = []

    def gate(props_, started, now=None):   # the window closes once the first wave has started
        asked.append(started)
        return "outside the maintenance windows; the next opens Sat" if len(asked) > 2 else None

    monkeypatch.setattr(du, "wave_gate", gate)
    outputs = du.rollout(props(cluster))
    assert outputs["upgraded"] == order[:1] and outputs["failed"] == {}
    assert outputs["paused"] == f"outside the maintenance windows; the next opens Sat; waiting: {', '.join(order[1:])}"
    assert "3 node(s) wait for the next `pulumi up`" in outputs["message"]
    drivers = api.driver_pods()
    for name in order[1:]:   # not started: same driver pod, schedulable, no taint of ours
        assert drivers[name]["metadata"]["uid"] == before[name], name
        assert not node(cluster, name)["spec"].get("unschedulable"), name
    assert pending_tainted(cluster) == set()
    monkeypatch.undo()
    outputs = du.rollout(props(cluster))   # no windows: the rest, the finished node not again
    assert outputs["upgraded"] == order[1:] and outputs["paused"] == ""


@pytest.mark.usefixtures("settled_cluster")
def test_a_node_stopped_after_its_new_driver_pod_started_is_finished_by_the_next_rollout(cluster):
    apply(cluster, [manifest("driver", version="3.3")])
    api = du.Cluster(props(cluster))
    revision = api.current_revision()
    first = wave_order(cluster, GCU_NODES)[0]
    half = du.NodeUpgrade(api, first, revision, lambda _: None)
    half.state(du.UPGRADE_REQUIRED)
    half.cordon()
    half.evict()
    half.pause_operands()
    half.restart_driver()   # `pulumi up` killed here: the new driver runs, the node is cordoned, its agents paused
    assert api.driver_pods()[first]["metadata"]["labels"][du.REVISION_LABEL] == revision
    assert node(cluster, first)["metadata"]["labels"][du.STATE_LABEL] == du.RESTARTING
    outputs = du.rollout(props(cluster))
    assert outputs["upgraded"][0] == first and sorted(outputs["upgraded"]) == GCU_NODES
    finished = node(cluster, first)
    assert not finished["spec"].get("unschedulable") and finished["metadata"]["labels"][du.STATE_LABEL] == du.DONE
    assert du.PAUSED_ANNOTATION not in (finished["metadata"].get("annotations") or {})
    assert "enflame.com/gcu.deploy.devicePlugin" not in finished["metadata"]["labels"]   # its agents back as they were


def test_what_the_driver_installs_is_told_apart_from_what_it_does_not():
    template = manifest("driver", version="1.0", env=[{"name": "WITH_REBOOT", "value": "false"}])["spec"]["template"]
    key = install_key(template)

    def changed(edit) -> str:
        copy = json.loads(json.dumps(template))
        edit(copy)
        return install_key(copy)

    container = lambda t: t["spec"]["containers"][0]  # noqa: E731
    # Nothing installed changes: labels, annotations, resources, probes, pull policy, tolerations, scheduling.
    assert changed(lambda t: t["metadata"]["labels"].update({"team": "ml"})) == key
    assert changed(lambda t: t["metadata"].setdefault("annotations", {}).update({"note": "x"})) == key
    assert changed(lambda t: container(t)["resources"]["limits"].update({"memory": "4Gi"})) == key
    assert changed(lambda t: container(t).update({"readinessProbe": None, "imagePullPolicy": "Never"})) == key
    assert changed(lambda t: t["spec"].update({"tolerations": [{"operator": "Exists"}], "priorityClassName": "x"})) == key
    # The API server's defaults are no change either.
    assert changed(lambda t: [v.get("hostPath", {}).setdefault("type", "") for v in t["spec"]["volumes"]]) == key
    # What the installer is, reads or writes to: a change.
    assert changed(lambda t: container(t).update({"image": "gcu-driver:1.1"})) != key
    assert changed(lambda t: container(t)["env"].__setitem__(0, {"name": "WITH_REBOOT", "value": "true"})) != key
    assert changed(lambda t: container(t).update({"args": ["--force"]})) != key
    assert changed(lambda t: t["spec"]["volumes"][0]["hostPath"].update({"path": "/opt/modules"})) != key
    assert changed(lambda t: t["spec"].update({"hostPID": False})) != key


def test_only_a_node_no_rollout_is_at_takes_the_restart_only_path():
    same = dict(driver_revision="rev-1", same_install=True)
    facts = [
        du.NodeFacts("idle", **same),
        du.NodeFacts("failed-before", labels={du.STATE_LABEL: du.FAILED}, **same),
        du.NodeFacts("cordoned-by-us", unschedulable=True, annotations={du.CORDONED_ANNOTATION: "true"}, **same),
        du.NodeFacts("new-version", driver_revision="rev-1"),
    ]
    planned = du.plan(facts, "rev-2", 1, "100%")
    assert planned.restarts == [["idle"]]
    assert planned.nodes == ["cordoned-by-us", "failed-before", "new-version"]


def test_a_node_an_interrupted_rollout_left_half_done_is_finished_even_with_its_new_driver_pod_in_place():
    # The CI failure this pins: `pulumi up` killed while a node was in `restarting-driver`, after its new driver pod had
    # been created. The next run took the node as current and left it cordoned, its agents paused, in that state.
    at_target = dict(driver_revision="rev-2")
    facts = [
        du.NodeFacts("killed-restarting", unschedulable=True, labels={du.STATE_LABEL: du.RESTARTING},
                     annotations={du.CORDONED_ANNOTATION: "true", du.PAUSED_ANNOTATION: "{}"}, **at_target),
        du.NodeFacts("operator-cordoned-paused", unschedulable=True, labels={du.STATE_LABEL: du.VALIDATING},
                     annotations={du.PAUSED_ANNOTATION: "{}"}, **at_target),
        du.NodeFacts("restart-only-killed", labels={du.STATE_LABEL: du.RESTARTING}, **at_target),
        du.NodeFacts("finished", labels={du.STATE_LABEL: du.DONE}, **at_target),
    ]
    planned = du.plan(facts, "rev-2", 1, "100%")
    assert planned.nodes == ["killed-restarting", "operator-cordoned-paused"]   # the full path, the cordoned one first
    assert planned.restarts == [["restart-only-killed"]] and planned.current == ["finished"]


def test_a_rolled_back_node_is_retried_first_and_the_preview_says_why():
    held = json.dumps({"label": "enflame.com/gcu.deploy.driver", "value": None, "revision": "rev-1"})
    reason = "restart driver: no new driver pod was scheduled on the node after 10 s"
    facts = [
        du.NodeFacts("a-busy", driver_revision="rev-1", gcu_pods=["default/job-1"]),
        du.NodeFacts("b-idle", driver_revision="rev-1"),
        du.NodeFacts("c-rolled-back", labels={du.STATE_LABEL: du.ROLLED_BACK, "enflame.com/gcu.deploy.driver": du.PAUSED},
                     annotations={du.ROLLBACK_ANNOTATION: held, du.REASON_ANNOTATION: reason}, gcu_pods=["default/job-2"]),
    ]
    planned = du.plan(facts, "rev-2", 1, "100%")
    assert planned.nodes == ["c-rolled-back", "b-idle", "a-busy"]   # before the nodes without GCU pods
    assert planned.retried == {"c-rolled-back": f"rolled back after {reason}"}
    assert du.previous_revision(facts[2]) == "rev-1" and du.previous_revision(facts[0]) == "rev-1"
    lines = du.describe(planned, "gcu-driver:2.0", ["gcu-driver:1.0"], 1, "100%")
    assert f"  retried: c-rolled-back (rolled back after {reason})" in lines


@pytest.mark.usefixtures("settled_cluster")
def test_with_rollback_a_node_whose_new_driver_fails_serves_again_on_the_driver_it_had(cluster):
    api = du.Cluster(props(cluster))
    old_revision = api.current_revision()
    old_image = api.driver_pods()["gcu-node-1"]["spec"]["containers"][0]["image"]
    # A taint that the new driver does not tolerate and the device plugin does: the new driver pod cannot land on the
    # node, its agents can come back.
    plugin = manifest("devicePlugin")
    plugin["spec"]["template"]["spec"]["tolerations"].append({"key": "gcu-test/broken", "operator": "Exists"})
    apply(cluster, [plugin])
    wait_settled(cluster, GCU_NODES)
    first, second, *later = wave_order(cluster, GCU_NODES)
    cluster.kubectl("taint", "node", second, "gcu-test/broken=true:NoSchedule")
    apply(cluster, [manifest("driver", version="3.4")])
    with pytest.raises(RuntimeError) as caught:
        du.rollout(props(cluster, driverReadyTimeoutSeconds=10, rollback=ROLLBACK))
    message = str(caught.value)
    assert f"{second} failed at restart driver: no new driver pod" in message and f"(rolled back to revision {old_revision})" in message, message
    assert f"Rolled back: {second}" in message and f"not started: {', '.join(later)}" in message
    back = node(cluster, second)
    # Serving again: uncordoned, its agents back, the driver it had Ready in a pod pinned to it, the DaemonSet held off.
    assert not back["spec"].get("unschedulable") and back["metadata"]["labels"][du.STATE_LABEL] == du.ROLLED_BACK
    assert back["metadata"]["labels"][ROLLBACK["holdLabel"]] == du.PAUSED
    assert du.PAUSED_ANNOTATION not in back["metadata"]["annotations"] and "enflame.com/gcu.deploy.devicePlugin" not in back["metadata"]["labels"]
    assert all_ready(cluster, "app.kubernetes.io/name=enflame-gcu-k8s-plugin", 4, "kube-system")
    (pinned,) = api.rollback_pods(second)
    assert pinned["spec"]["nodeName"] == second and pinned["metadata"]["labels"][du.REVISION_LABEL] == old_revision
    assert pinned["spec"]["containers"][0]["image"] == old_image and "affinity" not in pinned["spec"]
    assert second not in api.driver_pods() and not pinned["metadata"].get("ownerReferences")   # never the DaemonSet's
    assert pending_tainted(cluster) == set()
    # The preview of the next run: that node first, saying why.
    planned = du.plan(api.facts(GCU_NODES), api.current_revision(), 1, "50%")
    assert planned.nodes[0] == second and planned.retried[second].startswith("rolled back after restart driver: no new driver pod")
    # Fixed, the next run retries it first: the pinned pod goes, the DaemonSet's new pod lands, the label as it was.
    cluster.kubectl("taint", "node", second, "gcu-test/broken-")
    outputs = du.rollout(props(cluster, rollback=ROLLBACK))
    assert outputs["upgraded"][0] == second and sorted(outputs["upgraded"]) == sorted([second, *later])
    assert outputs["rolledBack"] == [] and api.rollback_pods(second) == []
    retried = node(cluster, second)["metadata"]
    assert ROLLBACK["holdLabel"] not in retried["labels"] and du.ROLLBACK_ANNOTATION not in retried["annotations"]
    assert api.driver_pods()[second]["metadata"]["labels"][du.REVISION_LABEL] == outputs["revision"]


@pytest.mark.usefixtures("settled_cluster")
def test_delete_puts_back_a_rolled_back_node_as_it_was(cluster):
    target = wave_order(cluster, GCU_NODES)[0]
    cluster.kubectl("label", "node", target, f"{ROLLBACK['holdLabel']}=true")   # the value GcuNodes would have set
    cluster.kubectl("taint", "node", target, "gcu-test/broken=true:NoSchedule")   # the device plugin tolerates it (above)
    apply(cluster, [manifest("driver", version="3.5")])
    with pytest.raises(RuntimeError, match="Rolled back"):
        du.rollout(props(cluster, driverReadyTimeoutSeconds=10, rollback=ROLLBACK))
    api = du.Cluster(props(cluster))
    assert len(api.rollback_pods(target)) == 1
    du.clean_up(props(cluster))
    meta = node(cluster, target)["metadata"]
    assert meta["labels"][ROLLBACK["holdLabel"]] == "true" and du.ROLLBACK_ANNOTATION not in meta["annotations"]
    assert du.STATE_LABEL not in meta["labels"] and not node(cluster, target)["spec"].get("unschedulable")
    wait_until(lambda: not api.rollback_pods(target), 60, what="the pinned previous driver pod gone")
    cluster.kubectl("taint", "node", target, "gcu-test/broken-")
    cluster.kubectl("label", "node", target, f"{ROLLBACK['holdLabel']}-")
    du.rollout(props(cluster))   # the DaemonSet back on the node: the rest of the module starts from every node upgraded


@pytest.mark.usefixtures("settled_cluster")
def test_delete_leaves_nothing_of_ours_even_mid_upgrade(cluster):
    apply(cluster, [manifest("driver", version="4.0")])
    # Interrupt a node half-way: cordoned and paused by gcu-stack, then delete the resource.
    half = du.NodeUpgrade(du.Cluster(props(cluster)), "gcu-node-1", "x", lambda _: None)
    half.state(du.UPGRADE_REQUIRED)
    half.cordon()
    half.pause_operands()
    half.cluster.set_pending_taint("gcu-node-2", True)   # a node still to upgrade
    cluster.kubectl("taint", "node", "gcu-node-2", "gcu-test/operators=true:NoSchedule")   # and someone else's taint
    du.clean_up(props(cluster))
    keys = [t["key"] for t in node(cluster, "gcu-node-2")["spec"]["taints"]]
    assert "gcu-test/operators" in keys and du.PENDING_TAINT["key"] not in keys, keys   # ours gone, theirs kept
    cluster.kubectl("taint", "node", "gcu-node-2", "gcu-test/operators-")
    for name in GCU_NODES:
        meta = node(cluster, name)["metadata"]
        assert du.STATE_LABEL not in meta["labels"], name
        assert not {du.REASON_ANNOTATION, du.CORDONED_ANNOTATION, du.PAUSED_ANNOTATION} & set(meta.get("annotations") or {}), name
        assert "enflame.com/gcu.deploy.devicePlugin" not in meta["labels"], name
        assert not node(cluster, name)["spec"].get("unschedulable"), name
    assert pending_tainted(cluster) == set()


@pytest.mark.usefixtures("settled_cluster")
def test_a_node_deleted_and_another_notready_mid_rollout_are_reported_without_waiting_out_timeouts(cluster):
    import threading
    import time

    # gcu-node-1's new driver cannot land (a taint it does not tolerate): its upgrade waits in `restart driver`,
    # and the node is deleted there. gcu-node-3's kubelet is down before its turn. No GCU job: the waves go by name.
    cluster.kubectl("delete", "deployment,pdb", "training", "-n", "default")
    wait_until(lambda: not pods(cluster, "app=training"), 60, what="the GCU job gone")
    cluster.kubectl("taint", "node", "gcu-node-1", "gcu-test/broken=true:NoSchedule")
    make_not_ready(cluster, "gcu-node-3")
    apply(cluster, [manifest("driver", version="5.0")])
    result: dict = {}

    def run():
        started = time.monotonic()
        try:
            result["outputs"] = du.rollout(props(cluster, driverReadyTimeoutSeconds=90))
        except Exception as error:  # noqa: BLE001 - the test reads it
            result["error"] = error
        result["seconds"] = time.monotonic() - started

    rollout = threading.Thread(target=run)
    rollout.start()
    wait_until(lambda: node(cluster, "gcu-node-1")["metadata"]["labels"].get(du.STATE_LABEL) == du.RESTARTING, 90,
               what="gcu-node-1 restarting its driver")
    cluster.kubectl("delete", "node", "gcu-node-1", "--wait=false")
    rollout.join(150)
    assert not rollout.is_alive()
    # Well inside the 90 s the driver step could wait: the deletion is seen within a poll, the NotReady node at once.
    assert result["seconds"] < 80, result
    message = str(result["error"])
    assert "gcu-node-3 failed at ready check: the node is NotReady (KubeletNotReady: container runtime is down)" in message
    assert f"{du.LEFT}: gcu-node-1" in message and "not started: gcu-node-4" in message
    assert node(cluster, "gcu-node-2")["metadata"]["labels"][du.STATE_LABEL] == du.DONE
    notready = node(cluster, "gcu-node-3")
    assert notready["metadata"]["labels"][du.STATE_LABEL] == du.FAILED and not notready["spec"].get("unschedulable")
    assert node(cluster, "gcu-node-4")["metadata"]["labels"].get(du.STATE_LABEL) in (None, du.DONE)

    # The node is back (a new node of that name) and the kubelet is up: the next run finishes, repeating nothing.
    make_ready(cluster, "gcu-node-3")
    cluster.add_nodes([NODES[0]])
    # The next run starts once the node controller has lifted gcu-node-3's not-ready taints and every agent is Ready.
    wait_settled(cluster, GCU_NODES)
    done_before = node(cluster, "gcu-node-2")["metadata"]["resourceVersion"]
    outputs = du.rollout(props(cluster))
    assert outputs["upgraded"] == ["gcu-node-3", "gcu-node-4"]
    assert node(cluster, "gcu-node-2")["metadata"]["resourceVersion"] == done_before
    assert all(not node(cluster, n)["spec"].get("unschedulable") for n in GCU_NODES)


@pytest.mark.parametrize("selector", ["app=training", "app==training,tier!=web", "app in (a, b),!preemptible",
                                      "team notin (x),gpu", "rank>2", "example.com/job in(a)", "app in (a,", "/app",
                                      "app=train ing", "tier notin ()", "tier in ()", "tier notin (web api)", "rank>x", "a b", "bad key=x", "a,"])
def test_the_settings_selector_check_agrees_with_the_api_server(cluster, selector):
    # The API server reads the selector the rollout will send it: what the setting check refuses, it refuses too.
    import urllib.parse

    from components.spec import label_selector_problem
    from devtools.localcluster import ApiError

    try:
        cluster.api.get(f"/api/v1/namespaces/default/pods?labelSelector={urllib.parse.quote(selector)}")
        taken = True
    except ApiError as error:
        assert error.status == 400, error
        taken = False
    assert (label_selector_problem(selector) is None) == taken, (selector, label_selector_problem(selector))


_TOKENS = ["app", "tier", "example.com/job", "a-b", "x", "web", "1", "(", ")", ",", " ", "=", "==", "!=", "!", "in",
           "notin", ">", "<", "_", ".", "-", "A", "é", "/", "a/b/c"]


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(_TOKENS), max_size=9).map("".join))
def test_any_string_the_selector_check_takes_the_api_server_takes_and_the_other_way_round(cluster, selector):
    test_the_settings_selector_check_agrees_with_the_api_server(cluster, selector)
