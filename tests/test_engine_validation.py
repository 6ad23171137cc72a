"""Post-deploy validation end to end: the real engine, provider and API server, kwok-simulated nodes.

The scenarios run in order on one stack, as an operator would meet them: a GCU node whose
device plugin advertises nothing fails `pulumi up` naming it; warn mode accepts it and reports
it; once the node advertises its GCUs the next `up` validates it; an `up` with nothing
changed runs no pod; a node that loses its GCUs shows in `refresh` and fails the next `up`.
The test plays the kubelet's part: it sets each node's allocatable.
"""

from __future__ import annotations

import pytest
from engine import GCU_NODE_LABELS, GCUS, changes, engine_stack, outputs, set_json_config, up_converged
from harness import GCU_VALIDATION
from pulumi import automation as auto
from realservers import AuditLog

# Outside CI's time budget: scripts/test-extended.sh runs this module (tests/conftest.py EXTENDED).
pytestmark = pytest.mark.extended

GCU = "enflame.com/gcu"
NODES = [
    ("gcu-node-1", GCU_NODE_LABELS, GCUS),
    ("gcu-node-2", GCU_NODE_LABELS),  # its device plugin advertises nothing (yet)
    ("cpu-node-1", {}),
]
MISSING = "gcu-node-2: no enflame.com/gcu in allocatable after 5 s — is the device plugin running there?"


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    with engine_stack(tmp_path_factory.mktemp("e2e-validation"), NODES, "validation", audit=True) as engine:
        configure(engine.stack, mode="fail")
        yield engine.stack, engine.cluster


def configure(stack: auto.Stack, **settings) -> None:
    set_json_config(stack, "validation", {"timeoutSeconds": 5, "workloadTimeoutSeconds": 60, **settings})


def leftovers(cluster) -> list[str]:
    return cluster.kubectl("get", "jobs,pods", "--all-namespaces", "-l", "app.kubernetes.io/component=validation", "-o", "name").stdout.split()


def jobs_created(audit: AuditLog) -> list[str]:
    return [e["objectRef"]["name"] for e in audit.events("jobs", user="admin") if e.get("verb") == "create"]


def validation_state(stack: auto.Stack) -> dict:
    (resource,) = [r for r in stack.export_stack().deployment["resources"] if r["type"] == GCU_VALIDATION]
    return resource["outputs"]


def test_1_up_fails_naming_the_gcu_node_without_capacity_and_leaves_no_pod(e2e):
    stack, cluster = e2e
    audit = AuditLog(cluster)
    audit.mark()
    with pytest.raises(auto.CommandError) as caught:
        stack.up(on_output=lambda _: None)
    text = str(caught.value)
    assert "GCU validation failed on 1 of 2 node(s):" in text and MISSING in text, text[-3000:]
    # The hint says whether the plugin runs there: kwok runs its pod (simulated), which advertises nothing.
    assert "(its pod enflame-gcu-k8s-plugin-" in text and "is Running and Ready: see its log)" in text
    # The healthy node was validated with a pod meanwhile, and that pod is gone.
    assert [name for name in jobs_created(audit) if "gcu-node-1" in name] and not [n for n in jobs_created(audit) if "gcu-node-2" in n]
    assert leftovers(cluster) == []


def test_2_warn_mode_lets_up_succeed_and_reports_the_node(e2e):
    stack, cluster = e2e
    configure(stack, mode="warn")
    lines: list[str] = []
    up_converged(stack, on_output=lines.append)
    out = outputs(stack)
    report = out["validation"]
    assert report["passed"] is False and report["mode"] == "warn" and report["resource"] == GCU
    (failure,) = report["failures"]
    assert failure.startswith(MISSING + " (its pod enflame-gcu-k8s-plugin-")
    assert report["nodes"]["gcu-node-1"]["passed"] and report["nodes"]["gcu-node-1"]["workload"] == "passed"
    assert report["nodes"]["gcu-node-2"]["passed"] is False and report["nodes"]["gcu-node-2"]["workload"] == "not run"
    assert out["readyResource"] == "5/5" and out["phase"] == "Degraded"
    assert "GCU validation failed on gcu-node-2: no enflame.com/gcu in allocatable" in "".join(lines)
    assert leftovers(cluster) == []


def test_3_once_the_node_advertises_its_gcus_the_next_up_validates_it(e2e):
    stack, cluster = e2e
    cluster.set_node_status("gcu-node-2", allocatable={GCU: "4"}, capacity={GCU: "4"})
    events: list = []
    stack.preview(on_event=events.append)
    changed = {
        e.resource_pre_event.metadata.urn.split("::")[-1]
        for e in events
        if e.resource_pre_event is not None and str(getattr(e.resource_pre_event.metadata.op, "value", "")) not in ("same", "read")
    }
    assert changed == {"gcu-validation"}, changed  # seen at preview time, from the node's capacity
    audit = AuditLog(cluster)
    audit.mark()
    up_converged(stack)
    out = outputs(stack)
    assert out["validation"]["passed"] is True and out["validation"]["failures"] == []
    assert {n: r["workload"] for n, r in out["validation"]["nodes"].items()} == {"gcu-node-1": "passed", "gcu-node-2": "passed"}
    assert out["phase"] == "Running" and out["readyResource"] == "5/5"
    assert len(jobs_created(audit)) == 2
    assert leftovers(cluster) == []


def test_4_an_up_with_nothing_changed_runs_no_pod(e2e):
    stack, cluster = e2e
    audit = AuditLog(cluster)
    audit.mark()
    result = up_converged(stack)
    assert changes(result.summary.resource_changes) == {}
    assert jobs_created(audit) == []
    assert outputs(stack)["phase"] == "Running"


def test_5_refresh_sees_a_node_that_lost_its_gcus_and_the_next_up_fails_naming_it(e2e):
    stack, cluster = e2e
    configure(stack, mode="fail")
    up_converged(stack)  # a settings change validates again: both nodes pass
    cluster.set_node_status("gcu-node-1", allocatable={GCU: None}, capacity={GCU: None})
    try:
        stack.refresh(on_output=lambda _: None)
        state = validation_state(stack)
        assert state["passed"] is False
        assert state["drift"] and state["drift"][0].startswith("gcu-node-1: no enflame.com/gcu in allocatable (it passed validation at ")
        with pytest.raises(auto.CommandError) as caught:
            stack.up(on_output=lambda _: None)
        assert "gcu-node-1: no enflame.com/gcu in allocatable after 5 s — is the device plugin running there?" in str(caught.value)
        assert leftovers(cluster) == []
    finally:
        cluster.set_node_status("gcu-node-1", allocatable={GCU: "4"}, capacity={GCU: "4"})
    up_converged(stack)
    assert outputs(stack)["phase"] == "Running"
