"""The validation step (components/steps/validation.py) under mocks: where it sits in the chain,
what it sends its resource, what the stack reports. The provider itself: tests/test_validation.py."""

import pytest
from harness import (
    CLUSTER_GUARD,
    GCU_NODES,
    GCU_VALIDATION,
    SEED_BLUEPRINT,
    ClusterMocks,
    fails,
    full_spec,
    run_full,
    run_program,
    seed_spec,
)

from components import links


def label(run, urn):
    registration = run.by_urn(urn)
    if registration.type == GCU_NODES:
        return "gcuNodes"
    if registration.type == CLUSTER_GUARD:
        return "cluster"
    return run.by_urn(registration.parent).name if registration.inputs.get("kind") else registration.type


def inputs(run):
    return {k: v for k, v in run.single(GCU_VALIDATION).inputs.items() if k != "__provider"}


def test_seed_validates_after_the_device_plugin_and_its_agents_as_a_child_of_the_stack(seed_run):
    validation = seed_run.single(GCU_VALIDATION)
    assert seed_run.by_urn(validation.parent).type == "gcu:stack:GcuResource"
    # The last link: after the exporter and GFD, which come after the device plugin; its nodes from GcuNodes.
    assert {label(seed_run, urn) for urn in validation.dependencies} == {"exporter", "gfd", "gcuNodes", "cluster"}
    (provider,) = [p for p in seed_run.of_type("pulumi:providers:pulumi-python") if p.name == "gcu-hoststate"]
    assert validation.provider.startswith(provider.urn + "::")  # the explicit, empty provider
    assert links.ORDER.index("validation") > max(links.ORDER.index(k) for k in ("devicePlugin", "gcusharePlugin", "exporter", "gfd"))


def test_seed_inputs_name_the_plugin_its_resource_and_the_toolkit_image_with_the_self_check(seed_run):
    got = inputs(seed_run)
    assert got["nodes"] == ["gcu-node-1", "gcu-node-2", "gcu-node-3"]  # GcuNodes' output
    assert (got["plugin"], got["resource"], got["pluginName"], got["pluginNamespace"]) == (
        "devicePlugin", "enflame.com/gcu", "enflame-gcu-k8s-plugin", "kube-system",
    )
    assert got["nodeSelector"] == {"enflame.com/gcu.present": "true"} and got["nodeNames"] == []
    assert got["image"] == "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-runtime:latest"
    assert got["command"] == ["/usr/local/bin/gcu-selfcheck"]
    assert got["runtimeClassName"] == "enflame" and got["namespace"] == "kube-system"
    assert (got["enabled"], got["mode"], got["workload"], got["timeoutSeconds"], got["sampleSize"]) == (True, "fail", True, 120, 0)
    assert got["instance"] == "enflame-gcu-resource"
    assert set(got["revision"]) == {"toolkit", "devicePlugin"}  # the driver is not deployed by the seed


def test_stack_output_reports_each_node_and_the_phase_is_running(seed_run):
    report = seed_run.outputs["validation"]
    assert report["passed"] is True and report["resource"] == "enflame.com/gcu" and report["failures"] == []
    assert sorted(report["nodes"]) == ["gcu-node-1", "gcu-node-2", "gcu-node-3"]
    assert report["nodes"]["gcu-node-1"]["workload"] == "passed"
    assert seed_run.outputs["phase"] == "Running"


def test_a_node_that_failed_validation_keeps_phase_from_running_but_not_ready_resource():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=ClusterMocks(failed_nodes=("gcu-node-2",)))
    assert run.outputs["readyResource"] == "5/5"  # components, as GcuResource counted them
    assert run.outputs["phase"] == "Degraded"
    (condition,) = run.outputs["conditions"]
    assert condition["status"] == "failed" and "validation did not pass" in condition["message"]
    assert condition["progress"] == 100
    report = run.outputs["validation"]
    assert report["passed"] is False
    assert report["failures"] == ["gcu-node-2: no enflame.com/gcu in allocatable after 120 s"]
    assert report["nodes"]["gcu-node-2"]["passed"] is False and report["nodes"]["gcu-node-1"]["passed"] is True


def test_components_not_ready_is_deploying_whatever_validation_says():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=ClusterMocks(ready=False, failed_nodes=("gcu-node-1",)))
    assert run.outputs["phase"] == "Deploying"


def test_in_preview_the_phase_is_not_reported_as_running():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, preview=True, mocks=ClusterMocks(dynamic=lambda args: {}))
    # The validation results are not known before the provider runs, so neither is the phase: not Running.
    assert "phase" in run.unknown_outputs and "phase" not in run.outputs


def test_gcushare_validates_its_memory_resource_on_its_nodes_after_the_extender(full):
    got = inputs(full)
    assert (got["plugin"], got["resource"], got["pluginName"]) == ("gcusharePlugin", "enflame.com/gcu-memory", "gcushare-device-plugin")
    validation = full.single(GCU_VALIDATION)
    waits = {label(full, urn) for urn in validation.dependencies}
    # Not Volcano nor Nightingale: they do not touch a GCU pod on a node.
    assert waits == {"exporter", "gfd", "gcushareScheduler", "gcuNodes", "cluster"}


def test_gcushare_nodes_limit_the_nodes_validated():
    run = run_full(full_spec(**{"gcusharePlugin.gcushareNodes": ["gcu-node-2"]}))
    assert inputs(run)["nodeNames"] == ["gcu-node-2"]


def test_a_plugin_node_selector_from_the_blueprint_is_what_is_validated():
    run = run_program({"spec": seed_spec(**{"devicePlugin.nodeSelector": {"pool": "gcu"}})})
    assert inputs(run)["nodeSelector"] == {"pool": "gcu"}


def test_without_a_device_plugin_nothing_is_validated_and_the_output_says_so():
    run = run_program({"spec": seed_spec(**{"devicePlugin.notDeploy": True})})
    assert run.of_type(GCU_VALIDATION) == []
    assert run.outputs["validation"] is None
    assert run.outputs["phase"] == "Running"


def test_settings_reach_the_resource():
    settings = {
        "mode": "warn", "timeoutSeconds": 30, "sampleSize": 2, "parallel": 4, "workloadTimeoutSeconds": 60,
        "image": "registry.local/gcu/check:1", "imagePullPolicy": "Always", "command": ["/bin/check", "--all"],
        "runtimeClassName": "", "namespace": "gcu-checks", "trigger": "2026-11-23",
    }
    got = inputs(run_program({"blueprint": str(SEED_BLUEPRINT), "validation": settings}))
    assert (got["mode"], got["timeoutSeconds"], got["sampleSize"], got["parallel"], got["workloadTimeoutSeconds"]) == ("warn", 30, 2, 4, 60)
    assert (got["image"], got["imagePullPolicy"], got["command"]) == ("registry.local/gcu/check:1", "Always", ["/bin/check", "--all"])
    assert (got["runtimeClassName"], got["namespace"], got["trigger"]) == ("", "gcu-checks", "2026-11-23")


def test_workload_off_sends_no_image():
    got = inputs(run_program({"blueprint": str(SEED_BLUEPRINT), "validation": {"workload": False}}))
    assert got["workload"] is False and got.get("image") is None


def test_without_the_toolkit_and_no_image_setting_only_capacity_is_validated():
    got = inputs(run_program({"spec": seed_spec(**{"toolkit.notDeploy": True})}))
    assert got["workload"] is False and got.get("image") is None
    with_image = inputs(run_program({"spec": seed_spec(**{"toolkit.notDeploy": True}), "validation": {"image": "r.local/check:1"}}))
    assert with_image["workload"] is True and with_image["image"] == "r.local/check:1"
    assert with_image["imagePullPolicy"] == "IfNotPresent"


def test_disabled_is_recorded_and_does_not_hold_the_phase():
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "validation": {"enabled": False}}, mocks=ClusterMocks(failed_nodes=("gcu-node-1",)))
    assert inputs(run)["enabled"] is False
    assert run.outputs["phase"] == "Running"


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"timeoutSecond": 5}, "gcu-stack:validation.timeoutSecond"),
        ({"mode": "ignore"}, "gcu-stack:validation.mode"),
        ({"timeoutSeconds": 0}, "gcu-stack:validation.timeoutSeconds"),
        ({"runtimeClassName": "Enflame Runtime"}, "gcu-stack:validation.runtimeClassName"),
        ({"command": []}, "gcu-stack:validation.command"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_declared(settings, expected):
    fails({"blueprint": str(SEED_BLUEPRINT), "validation": settings}, expected)


def test_only_what_a_gcu_pod_depends_on_validates_again():
    """The exporter's upgrade leaves the resource's inputs alone; the device plugin's or the toolkit's does not."""
    base = inputs(run_program({"spec": seed_spec()}))
    exporter = inputs(run_program({"spec": seed_spec(**{"exporter.version": "2.1.0"})}))
    plugin = inputs(run_program({"spec": seed_spec(**{"devicePlugin.version": "2.1.0"})}))
    toolkit = inputs(run_program({"spec": seed_spec(**{"toolkit.env": [{"name": "X", "value": "1"}]})}))
    assert exporter == base
    assert plugin["revision"]["devicePlugin"][0]["image"].endswith("/gcu-plugin:2.1.0")
    assert toolkit["revision"]["toolkit"][0]["env"] == [["X", "1"]]
    assert plugin["revision"]["toolkit"] == base["revision"]["toolkit"]
