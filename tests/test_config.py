"""Blueprint and stack-config validation: every bad input fails before any object is declared."""

import json

import pulumi
import pytest
import yaml

from harness import SEED_BLUEPRINT, run_program

SEED = json.loads(SEED_BLUEPRINT.read_text())
DELETE = object()  # seed_spec(**{path: DELETE}) removes the key


def seed_spec(**changes):
    spec = json.loads(json.dumps(SEED["spec"]))
    for path, value in changes.items():
        node = spec
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return spec



def fails(config, *expected):
    """The program fails with every expected fragment and declares nothing but the stack."""
    with pytest.raises(pulumi.RunError) as caught:
        run_program(config)
    message = str(caught.value)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    assert [r.type for r in caught.value.registrations] == ["pulumi:pulumi:Stack"], "declared something before failing"
    return message


def test_unknown_field_is_named_with_a_suggestion():
    spec = seed_spec(**{"exporter.imagePulPolicy": "Always"})
    fails({"spec": spec}, "spec.exporter.imagePulPolicy: unknown field (did you mean imagePullPolicy?)")


def test_unknown_component_key_lists_nothing_close_gets_allowed_keys():
    fails({"spec": {"gpuExporter": {}}}, "spec.gpuExporter: unknown field", "exporter")


def test_memory_unit_must_be_one_of_the_share_levels():
    spec = seed_spec(**{"gcusharePlugin.memoryUnit": "0.5"})
    fails({"spec": spec}, "spec.gcusharePlugin.memoryUnit: must be one of 1, 0.1, 0.01, 0.001")


@pytest.mark.parametrize("unit", ["1", "0.1", "0.01", "0.001", 1, 0.1])
def test_memory_unit_accepts_every_level_as_string_or_number(unit):
    spec = seed_spec(**{"gcusharePlugin.memoryUnit": unit})
    run_program({"spec": spec})


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


def test_blueprint_and_spec_together_is_an_error():
    fails({"blueprint": str(SEED_BLUEPRINT), "spec": SEED["spec"]}, "gcu-stack:blueprint and gcu-stack:spec are both set")


def test_no_blueprint_at_all_says_how_to_set_one():
    fails({}, "no blueprint", "pulumi config set gcu-stack:blueprint")


def test_missing_blueprint_file_is_named(tmp_path):
    fails({"blueprint": str(tmp_path / "nope.json")}, "gcu-stack:blueprint: file", "nope.json does not exist")


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "gr.json"
    path.write_text('{\n  "apiVersion": "topsops.enflame.com/v1",\n  "kind": GcuResource\n}')
    fails({"blueprint": str(path)}, str(path), "line 3", "not valid JSON")


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "gr.yaml"
    path.write_text("apiVersion: topsops.enflame.com/v1\nkind: GcuResource\nspec:\n  nfd: [unclosed\n")
    fails({"blueprint": str(path)}, str(path), "not valid YAML")


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


def test_file_that_is_not_an_object(tmp_path):
    path = tmp_path / "gr.yaml"
    path.write_text("- a\n- b\n")
    fails({"blueprint": str(path)}, "must hold one GcuResource object")


def test_unknown_stack_setting_is_named():
    fails({"blueprint": str(SEED_BLUEPRINT), "kubeContxt": "x"}, "gcu-stack:kubeContxt: unknown setting (did you mean gcu-stack:kubeContext?)")


def test_relative_blueprint_resolves_against_the_project_dir(tmp_path):
    (tmp_path / "blueprints").mkdir()
    (tmp_path / "blueprints" / "gr.yaml").write_text(yaml.safe_dump(SEED))
    run = run_program({"blueprint": "blueprints/gr.yaml"}, project_dir=tmp_path)
    assert run.outputs["readyResource"] == "5/5"


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


def test_errors_declare_nothing():
    with pytest.raises(pulumi.RunError) as caught:
        run_program({"spec": seed_spec(**{"exporter.imagePulPolicy": "x"})})
    # Only the stack itself was registered: no provider, no component, no object.
    assert [r.type for r in caught.value.registrations] == ["pulumi:pulumi:Stack"]
