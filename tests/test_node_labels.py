"""GCU node labels (components/providers/node_labels.py, and GcuNodes in provider.py): the pure planner,
then against a real kube-apiserver (with etcd): labels, opt-outs, exact removal, drift, conflicts."""

import json
import threading
import time

import pytest
from realservers import AuditLog

from components.providers.cluster import core_api
from components.providers.node_labels import (
    MANAGED_ANNOTATION,
    DriverMissingError,
    GcuNodesProvider,
    Selection,
    drift_of,
    plan_node,
    wanted_labels,
)

NFD = "feature.node.kubernetes.io/pci-1e36.present"
DRIVER = "enflame.com/gcu.driver.present"
PRESENT = "enflame.com/gcu.present"
DEPLOY = "enflame.com/gcu.deploy."
COMPONENTS = ["devicePlugin", "exporter", "gfd", "nfd", "toolkit"]
OURS = {PRESENT: "true", **{DEPLOY + c: "true" for c in COMPONENTS}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from devtools.localcluster import LocalCluster

    with LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=()) as running:
        yield running


@pytest.fixture
def api(cluster):
    return core_api(cluster.kubeconfig, None)


@pytest.fixture
def audit(cluster):
    return AuditLog(cluster)


def make_nodes(api, nodes):
    """Replace every node in the cluster with `nodes`: {name: labels}."""
    for node in json.loads(api.list_node(_preload_content=False).data)["items"]:
        api.delete_node(node["metadata"]["name"], _preload_content=False)
    for name, labels in nodes.items():
        api.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}, _preload_content=False)


def labels_of(api, name):
    return json.loads(api.read_node(name, _preload_content=False).data)["metadata"].get("labels") or {}


def annotations_of(api, name):
    return json.loads(api.read_node(name, _preload_content=False).data)["metadata"].get("annotations") or {}


def props(cluster, **overrides):
    base = {
        "kubeconfig": cluster.kubeconfig,
        "context": None,
        "components": COMPONENTS,
        "names": [],
        "selector": {},
        "driverLabel": f"{DRIVER}=true",
        "requireDriver": False,
        "pageSize": 2,  # several pages even on a small cluster
    }
    base.update(overrides)
    return base


GCU = {NFD: "true", DRIVER: "true"}


def test_labels_only_gcu_nodes_and_respects_opt_outs(cluster, api):
    make_nodes(
        api,
        {
            "gcu-a": dict(GCU),
            "gcu-b": {**GCU, DEPLOY + "exporter": "false"},
            "gcu-c": {**GCU, DEPLOY + "operands": "false"},
            "cpu-a": {"team": "cpu"},
        },
    )
    out = GcuNodesProvider().create(props(cluster)).outs
    assert out["nodes"] == ["gcu-a", "gcu-b", "gcu-c"]
    assert out["optedOut"] == ["gcu-c"]
    assert out["drivers"] == {"gcu-a": True, "gcu-b": True, "gcu-c": True}
    assert {k: v for k, v in labels_of(api, "gcu-a").items() if k in OURS} == OURS
    b = labels_of(api, "gcu-b")
    assert b[DEPLOY + "exporter"] == "false" and b[DEPLOY + "toolkit"] == "true"
    assert DEPLOY + "exporter" not in json.loads(annotations_of(api, "gcu-b")[MANAGED_ANNOTATION])
    assert not set(OURS) & set(labels_of(api, "gcu-c"))
    assert not [k for k in labels_of(api, "cpu-a") if k.startswith("enflame.com/")]
    assert labels_of(api, "cpu-a")["team"] == "cpu"
    assert MANAGED_ANNOTATION not in annotations_of(api, "cpu-a")


def test_second_apply_issues_zero_writes(cluster, api, audit):
    make_nodes(api, {f"gcu-{i}": dict(GCU) for i in range(5)} | {"cpu-a": {}})
    provider = GcuNodesProvider()
    audit.mark()
    first = provider.create(props(cluster)).outs
    assert audit.writes(user="admin") == 5
    audit.mark()
    second = provider.update("gcu-nodes", first, props(cluster)).outs
    assert audit.writes(user="admin") == 0
    assert second["nodes"] == first["nodes"]
    assert provider.diff("gcu-nodes", second, {**props(cluster), "__provider": "changed"}).changes is False


def test_delete_removes_only_ours_and_only_with_our_value(cluster, api):
    make_nodes(api, {"gcu-a": {**GCU, PRESENT: "true", "team": "ml"}, "gcu-b": dict(GCU)})
    provider = GcuNodesProvider()
    out = provider.create(props(cluster)).outs
    # gcu-a already had enflame.com/gcu.present (e.g. from NFD): it is not ours to remove.
    assert PRESENT not in json.loads(annotations_of(api, "gcu-a")[MANAGED_ANNOTATION])
    api.patch_node("gcu-b", {"metadata": {"labels": {DEPLOY + "gfd": "keep-me"}}},
                   _content_type="application/merge-patch+json", _preload_content=False)
    provider.delete("gcu-nodes", out)
    def ours_and_theirs(name):
        # The API server adds its own beta.kubernetes.io labels to Node objects.
        return {k: v for k, v in labels_of(api, name).items() if not k.startswith("beta.kubernetes.io/")}

    assert ours_and_theirs("gcu-a") == {**GCU, PRESENT: "true", "team": "ml"}
    assert ours_and_theirs("gcu-b") == {**GCU, DEPLOY + "gfd": "keep-me"}
    assert MANAGED_ANNOTATION not in annotations_of(api, "gcu-a")
    assert MANAGED_ANNOTATION not in annotations_of(api, "gcu-b")


def test_refresh_reports_drift_and_update_repairs_it(cluster, api):
    make_nodes(api, {"gcu-a": dict(GCU)})
    provider = GcuNodesProvider()
    out = provider.create(props(cluster)).outs
    api.patch_node("gcu-a", {"metadata": {"labels": {DEPLOY + "exporter": None}}},
                   _content_type="application/merge-patch+json", _preload_content=False)
    refreshed = provider.read("gcu-nodes", out).outs
    assert refreshed["drift"] == [f"gcu-a: managed label {DEPLOY}exporter was removed"]
    assert provider.diff("gcu-nodes", refreshed, props(cluster)).changes is True
    repaired = provider.update("gcu-nodes", refreshed, props(cluster)).outs
    assert repaired["drift"] == []
    assert labels_of(api, "gcu-a")[DEPLOY + "exporter"] == "true"


def test_a_new_gcu_node_shows_in_the_diff(cluster, api):
    make_nodes(api, {"gcu-a": dict(GCU)})
    provider = GcuNodesProvider()
    out = provider.create(props(cluster)).outs
    api.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gcu-new", "labels": dict(GCU)}}, _preload_content=False)
    assert provider.diff("gcu-nodes", out, props(cluster)).changes is True


def test_concurrent_writer_causing_conflicts_is_survived(cluster, api, audit, monkeypatch):
    from components.providers import node_labels

    names = [f"gcu-{i}" for i in range(20)]
    make_nodes(api, {n: dict(GCU) for n in names})
    stop = threading.Event()
    other = core_api(cluster.kubeconfig, None)

    def touch(name, i):
        other.patch_node(name, {"metadata": {"annotations": {"meddler": str(i)}}},
                         _content_type="application/merge-patch+json", _preload_content=False)

    def meddle():
        i = 0
        while not stop.is_set():
            for name in names:
                touch(name, i)
            i += 1

    # The thread alone races the provider, and under load it can lose every race (CI saw 0 conflicts once):
    # so the writer also changes every node between the provider's list and its writes, and each first
    # write carries a stale resourceVersion.
    real_reconcile = node_labels.NodeLabeler._reconcile

    def reconcile_after_a_concurrent_write(self, nodes, remove_all):
        for node in nodes:
            touch(node["metadata"]["name"], "between")
        return real_reconcile(self, nodes, remove_all)

    monkeypatch.setattr(node_labels.NodeLabeler, "_reconcile", reconcile_after_a_concurrent_write)

    writer = threading.Thread(target=meddle)
    audit.mark()
    writer.start()
    try:
        time.sleep(0.3)
        out = GcuNodesProvider().create(props(cluster, pageSize=5)).outs
    finally:
        stop.set()
        writer.join()
    assert audit.conflicts(user="admin") >= len(names), "the concurrent writer caused too few conflicts; the test proves nothing"
    assert out["nodes"] == sorted(names)
    for name in names:
        assert {k: v for k, v in labels_of(api, name).items() if k in OURS} == OURS


def test_a_node_that_disappears_mid_run_is_tolerated(cluster, api):
    make_nodes(api, {"gcu-a": dict(GCU), "gcu-gone": dict(GCU)})
    from components.providers import node_labels

    real_write = node_labels.NodeLabeler._write

    def delete_first(self, node, plan, remove_all):
        if plan.name == "gcu-gone":
            api.delete_node("gcu-gone", _preload_content=False)
        return real_write(self, node, plan, remove_all)

    node_labels.NodeLabeler._write = delete_first
    try:
        out = GcuNodesProvider().create(props(cluster)).outs
    finally:
        node_labels.NodeLabeler._write = real_write
    assert out["nodes"] == ["gcu-a"]
    assert labels_of(api, "gcu-a")[PRESENT] == "true"


def test_missing_driver_stops_before_any_write_with_both_ways_out(cluster, api, audit):
    make_nodes(api, {"gcu-a": dict(GCU), "gcu-nodrv": {NFD: "true"}})
    audit.mark()
    with pytest.raises(DriverMissingError) as caught:
        GcuNodesProvider().create(props(cluster, requireDriver=True))
    message = str(caught.value)
    assert "gcu-nodrv" in message and "gcu-a" not in message
    assert "install the driver on the node in advance" in message
    assert "spec.driver.notDeploy: false" in message
    assert audit.writes(user="admin") == 0


def test_explicit_names_and_selector_choose_the_nodes(cluster, api):
    make_nodes(api, {"a": {"pool": "gcu", DRIVER: "true"}, "b": {"pool": "cpu"}, "c": dict(GCU)})
    by_selector = GcuNodesProvider().create(props(cluster, selector={"pool": "gcu"})).outs
    assert by_selector["nodes"] == ["a"]
    GcuNodesProvider().delete("gcu-nodes", by_selector)
    by_name = GcuNodesProvider().create(props(cluster, names=["b", "c"], driverLabel=None)).outs
    assert by_name["nodes"] == ["b", "c"]
    assert PRESENT not in labels_of(api, "a")


def test_provider_survives_pickling_and_runs_in_a_fresh_process(cluster, api, tmp_path):
    """What the engine does: serialize the provider, load it elsewhere, call it with inputs only."""
    import subprocess
    import sys

    from pulumi.dynamic.dynamic import serialize_provider

    make_nodes(api, {"gcu-a": dict(GCU)})
    blob = serialize_provider(GcuNodesProvider())
    script = (
        "import base64, json, sys, dill\n"
        "provider = dill.loads(base64.b64decode(sys.argv[1]))\n"
        "print(json.dumps(provider.create(json.loads(sys.argv[2])).outs['nodes']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, blob, json.dumps(props(cluster))],
                          capture_output=True, text=True, cwd=str(tmp_path), env={"PYTHONPATH": str(__import__("harness").PROJECT_DIR)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["gcu-a"]


def test_diff_without_cluster_access_falls_back_to_inputs(cluster):
    unreachable = props(cluster, kubeconfig="/nonexistent/kubeconfig")
    olds = {**unreachable, "nodes": [], "drift": []}
    assert GcuNodesProvider().diff("gcu-nodes", olds, unreachable).changes is False
    assert GcuNodesProvider().diff("gcu-nodes", olds, {**unreachable, "components": ["exporter"]}).changes is True


# ---------------------------------------------------------------------------- the pure planner
WANTED = wanted_labels(("exporter", "toolkit"))
EXPORTER = "enflame.com/gcu.deploy.exporter"
TOOLKIT = "enflame.com/gcu.deploy.toolkit"


def annotated(keys):
    return {MANAGED_ANNOTATION: json.dumps(keys)}


def test_fresh_node_gets_every_wanted_label_and_the_record():
    plan = plan_node("n", {}, {}, WANTED)
    assert plan.patch_labels == {PRESENT: "true", EXPORTER: "true", TOOLKIT: "true"}
    assert plan.recorded == tuple(sorted([PRESENT, EXPORTER, TOOLKIT]))
    assert json.loads(plan.patch("7")["metadata"]["annotations"][MANAGED_ANNOTATION]) == list(plan.recorded)
    assert plan.patch("7")["metadata"]["resourceVersion"] == "7"


def test_correct_node_needs_no_write():
    labels = {PRESENT: "true", EXPORTER: "true", TOOLKIT: "true"}
    plan = plan_node("n", labels, annotated(sorted(labels)), WANTED)
    assert not plan.needs_write


def test_existing_labels_are_not_ours_and_an_opt_out_is_respected():
    plan = plan_node("n", {PRESENT: "true", EXPORTER: "false"}, {}, WANTED)
    assert plan.patch_labels == {TOOLKIT: "true"}
    assert plan.recorded == (TOOLKIT,)


def test_removal_only_of_ours_and_only_with_our_value():
    labels = {PRESENT: "true", EXPORTER: "custom", TOOLKIT: "true", "team": "ml"}
    plan = plan_node("n", labels, annotated([EXPORTER, TOOLKIT]), {})
    assert plan.patch_labels == {TOOLKIT: None}
    assert plan.recorded == ()
    assert plan.patch("1")["metadata"]["annotations"] == {MANAGED_ANNOTATION: None}


def test_component_dropped_from_the_spec_loses_its_deploy_label():
    labels = {PRESENT: "true", EXPORTER: "true", TOOLKIT: "true"}
    plan = plan_node("n", labels, annotated(sorted(labels)), wanted_labels(("toolkit",)))
    assert plan.patch_labels == {EXPORTER: None}
    assert plan.recorded == tuple(sorted([PRESENT, TOOLKIT]))


def test_managed_label_removed_by_hand_is_drift_and_is_re_added():
    labels = {PRESENT: "true", TOOLKIT: "true"}
    annotations = annotated([PRESENT, EXPORTER, TOOLKIT])
    assert drift_of("n", labels, annotations, WANTED) == [f"n: managed label {EXPORTER} was removed"]
    assert plan_node("n", labels, annotations, WANTED).patch_labels == {EXPORTER: "true"}


def test_selection_by_nfd_label_names_or_selector():
    nfd = {"feature.node.kubernetes.io/pci-1e36.present": "true"}
    assert Selection().matches("a", nfd) and not Selection().matches("a", {})
    assert Selection(names=("b",)).matches("b", {}) and not Selection(names=("b",)).matches("a", nfd)
    assert Selection(selector=(("pool", "gcu"),)).matches("a", {"pool": "gcu"})


def test_a_label_paused_by_a_driver_upgrade_stays_ours_and_is_no_drift():
    from components.names import PAUSED_FOR_DRIVER_UPGRADE

    labels = {PRESENT: "true", EXPORTER: PAUSED_FOR_DRIVER_UPGRADE, TOOLKIT: "true"}
    recorded = annotated([PRESENT, EXPORTER, TOOLKIT])
    plan = plan_node("n", labels, recorded, WANTED)
    assert not plan.needs_write  # kept in the record, not overwritten: the upgrade puts it back
    assert drift_of("n", labels, recorded, WANTED) == []
