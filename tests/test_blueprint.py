"""The blueprint model (components/blueprint.py, spec.py): every bad input names its field; old names work."""

import json

import pytest
from harness import DELETE, SEED, fails, run_program, seed_spec


def test_unknown_field_is_named_with_a_suggestion():
    spec = seed_spec(**{"exporter.imagePulPolicy": "Always"})
    fails({"spec": spec}, "spec.exporter.imagePulPolicy: unknown field (did you mean imagePullPolicy?)")


def test_unknown_component_key_lists_nothing_close_gets_allowed_keys():
    fails({"spec": {"gpuExporter": {}}}, "spec.gpuExporter: unknown field", "exporter")


def test_invalid_value_in_a_component_that_is_not_deployed_is_still_an_error():
    spec = seed_spec(**{"volcano.scheduler": {"imagePullPolicy": "Sometimes"}})
    assert spec["volcano"]["notDeploy"] is True
    fails({"spec": spec}, "spec.volcano.scheduler.imagePullPolicy: must be one of Always, IfNotPresent, Never")


def test_device_plugin_and_gcushare_plugin_together_name_both():
    spec = seed_spec(**{"gcusharePlugin.notDeploy": False})
    fails({"spec": spec}, "spec.devicePlugin", "spec.gcusharePlugin", "cannot both be deployed")


def test_gcushare_with_device_plugin_off_is_fine():
    spec = seed_spec(**{"gcusharePlugin.notDeploy": False, "devicePlugin.notDeploy": True})
    run_program({"spec": spec})


def test_plugin_and_device_plugin_both_given_is_an_error():
    spec = seed_spec(plugin={"image": "gcu-plugin"})
    fails({"spec": spec}, "`plugin` and `devicePlugin`")


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ("toolkit.name", "Enflame_Toolkit", "spec.toolkit.name: 'Enflame_Toolkit' is not a lowercase RFC 1123 name"),
        ("toolkit.namespace", "kube system", "spec.toolkit.namespace"),
        ("toolkit.version", "v1:2", "spec.toolkit.version"),
        ("toolkit.repository", "https://registry", "spec.toolkit.repository"),
        ("toolkit.image", "gcu-runtime:latest", "spec.toolkit.image"),
        ("toolkit.nodeSelector", {"bad key!": "true"}, "spec.toolkit.nodeSelector"),
        ("toolkit.nodeSelector", {"enflame.com/gcu.present": True}, "spec.toolkit.nodeSelector.enflame.com/gcu.present"),
        ("toolkit.env", [{"name": "A", "valu": "1"}], "spec.toolkit.env[0].valu: unknown field (did you mean value?)"),
        ("toolkit.env", [{"value": "1"}], "spec.toolkit.env[0].name: required field is missing"),
        ("driver.notDeploy", "perhaps", "spec.driver.notDeploy"),
        ("nfd.master", {"imagePullPolicy": "Sometimes"}, "spec.nfd.master.imagePullPolicy: must be one of"),
        ("nightingale.mysql-pv", {"hostpath": "relative/dir"}, "spec.nightingale.mysql-pv"),
        ("nightingale.agentd-deploy", {"imagePullPolicy": "Never", "replicas": 2}, "spec.nightingale.agentd-deploy.replicas: unknown field"),
        ("gcusharePlugin.gcushareNodes", "node-1", "spec.gcusharePlugin.gcushareNodes"),
    ],
)
def test_bad_values_name_their_field(path, value, expected):
    message = fails({"spec": seed_spec(**{path: value})}, expected)
    assert message.count("\n  - ") >= 1


def test_all_problems_are_reported_at_once():
    spec = seed_spec(**{"exporter.imagePulPolicy": "Always", "toolkit.imagePullPolicy": "Sometimes"})
    fails({"spec": spec}, "spec.exporter.imagePulPolicy", "spec.toolkit.imagePullPolicy")


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"apiVersion": "topsops.enflame.com/v2"}, "apiVersion: must be one of topsops.enflame.com/v1"),
        ({"kind": "GpuResource"}, "kind: must be one of GcuResource"),
        ({"metadata": {}}, "metadata.name: required field is missing"),
        ({"spek": {}}, "spek: unknown field (did you mean spec?)"),
    ],
)
def test_document_level_errors(tmp_path, change, expected):
    path = tmp_path / "gr.json"
    path.write_text(json.dumps({**SEED, **change}))
    fails({"blueprint": str(path)}, expected)


def test_exported_cluster_object_with_status_and_server_metadata_is_accepted(tmp_path):
    exported = {
        **SEED,
        "metadata": {"name": "enflame-gcu-resource", "uid": "1f83", "resourceVersion": "42", "generation": 3},
        "status": {"phase": "Running", "readyResource": "5/5"},
    }
    path = tmp_path / "gr.json"
    path.write_text(json.dumps(exported))
    run = run_program({"blueprint": str(path)})
    assert run.outputs["observedGeneration"] == 3


def test_plugin_is_another_name_for_device_plugin():
    spec = seed_spec(devicePlugin=DELETE)
    spec["plugin"] = SEED["spec"]["devicePlugin"]
    run = run_program({"spec": spec})
    assert run.component("devicePlugin")
    assert run.one("DaemonSet", "enflame-gcu-k8s-plugin")
    assert run.outputs["readyResource"] == "5/5"
