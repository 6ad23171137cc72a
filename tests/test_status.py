"""Status (components/declare/status.py): from the objects' own status, in GcuResource.status's shape."""

from harness import SEED_BLUEPRINT, ClusterMocks, run_program


def test_seed_status(seed_run):
    outputs = seed_run.outputs
    assert outputs["readyResource"] == "5/5"
    assert outputs["phase"] == "Running"
    assert outputs["clusterGCUNodes"] == ["gcu-node-1", "gcu-node-2", "gcu-node-3"]
    assert outputs["observedGeneration"] == 1
    statuses = outputs["resourceStatuses"]
    assert [s["name"] for s in statuses] == ["nfd", "toolkit", "devicePlugin", "exporter", "gfd"]
    assert all(s["namespace"] == "kube-system" and s["status"] == "Running" for s in statuses)
    exporter = next(s for s in statuses if s["name"] == "exporter")
    assert {"group": "apps", "version": "v1", "kind": "DaemonSet", "name": "enflame-gcu-exporter"} in exporter["ownResources"]
    assert {"version": "v1", "kind": "Service", "name": "enflame-gcu-exporter"} in exporter["ownResources"]
    (condition,) = outputs["conditions"]
    assert condition["action"] == "deploy" and condition["status"] == "success" and condition["progress"] == 100


def test_status_is_derived_from_the_objects_not_a_constant():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=ClusterMocks(ready=False))
    assert run.outputs["phase"] == "Deploying"
    assert run.outputs["readyResource"] == "0/5"
    assert {s["status"] for s in run.outputs["resourceStatuses"]} == {"Deploying"}
    condition = run.outputs["conditions"][0]
    assert condition["status"] == "deploying" and condition["progress"] == 0


def test_status_unknown_in_preview_is_not_reported_as_running():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, preview=True, mocks=ClusterMocks(ready=False))
    assert run.outputs["phase"] != "Running"


def test_every_component_is_counted(full):
    assert full.outputs["readyResource"] == "8/8"
    names = [s["name"] for s in full.outputs["resourceStatuses"]]
    assert names == ["nfd", "toolkit", "gcusharePlugin", "exporter", "gfd", "gcushareScheduler", "volcano", "nightingale"]
    assert full.outputs["phase"] == "Running"


def test_last_update_time_is_the_newest_change_gcu_stack_applied_not_a_creation_time():
    run = run_program(
        {"blueprint": str(SEED_BLUEPRINT)},
        mocks=ClusterMocks(applied={"exporter-daemonset": "2026-11-21T10:00:00Z", "gfd-daemonset": "2026-11-21T08:00:00Z"}),
    )
    (condition,) = run.outputs["conditions"]
    # The exporter's upgrade, not a creation time, and not the controllers' later status writes.
    assert condition["lastUpdateTime"] == "2026-11-21T10:00:00Z"


def test_last_update_time_falls_back_to_creation_without_managed_fields():
    from components.declare.status import _applied_at

    assert _applied_at({"creationTimestamp": "2026-01-01T00:00:00Z"}) == "2026-01-01T00:00:00Z"
    assert _applied_at({"creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [
        {"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-01T00:00:00Z"},
        {"manager": "pulumi-kubernetes-1", "operation": "Apply", "time": "2026-02-01T00:00:00Z"},
    ]}) == "2026-02-01T00:00:00Z"


def test_each_component_reports_its_own_entry_once():
    """resourceStatuses is the components' own entries (name = spec key), nothing derived twice."""
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    from components import links

    names = [s["name"] for s in run.outputs["resourceStatuses"]]
    # In chain order (the order components are built in), each component once.
    declared = {r.name for r in run.registrations if r.type.startswith("gcu:components:")}
    assert names == [key for key in links.ORDER if key in declared]
    assert all(set(s) == {"name", "namespace", "status", "ownResources"} for s in run.outputs["resourceStatuses"])
