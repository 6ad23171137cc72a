"""The pure label planner: what gets written on one node."""

import json

from components.hoststate.node_labels import MANAGED_ANNOTATION, Selection, drift_of, plan_node, wanted_labels

WANTED = wanted_labels(("exporter", "toolkit"))
PRESENT = "enflame.com/gcu.present"
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
