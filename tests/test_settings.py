"""Stack configuration (components/settings.py): blueprint files, inline specs and `gcu-stack:*` settings."""

import json

import pulumi
import pytest
import yaml

from harness import SEED, SEED_BLUEPRINT, daemonsets, fails, run_program, seed_spec
from k8s_schema import normalise


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


def test_errors_declare_nothing():
    with pytest.raises(pulumi.RunError) as caught:
        run_program({"spec": seed_spec(**{"exporter.imagePulPolicy": "x"})})
    # Only the stack itself was registered: no provider, no component, no object.
    assert [r.type for r in caught.value.registrations] == ["pulumi:pulumi:Stack"]


def test_yaml_blueprint_file(tmp_path, seed_run):
    path = tmp_path / "gcu-resource.yaml"
    path.write_text(yaml.safe_dump(SEED))
    run = run_program({"blueprint": str(path)})
    assert set(daemonsets(run)) == set(daemonsets(seed_run))


def test_inline_spec_matches_the_file(seed_run):
    run = run_program({"spec": SEED["spec"]})
    assert {r.urn: normalise(r.inputs) for r in run.k8s()} == {r.urn: normalise(r.inputs) for r in seed_run.k8s()}


def test_inline_spec_name_setting_names_the_resource():
    run = run_program({"spec": SEED["spec"], "name": "lab-a"})
    assert any(r.type == "gcu:stack:GcuResource" and r.name == "lab-a" for r in run.registrations)
    assert run.one("DaemonSet", "enflame-gcu-exporter").inputs["metadata"]["labels"]["app.kubernetes.io/instance"] == "lab-a"


def test_seed_json_and_inline_config_text_round_trip():
    # Pulumi hands object config to the program as JSON text.
    run = run_program({"spec": json.dumps(SEED["spec"])})
    assert run.outputs["readyResource"] == "5/5"


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"dockerRuntime": {"mode": "bounce"}}, "gcu-stack:dockerRuntime.mode: must be one of reload, restart, none"),
        ({"dockerRuntime": {"daemonJson": "etc/docker/daemon.json"}}, "gcu-stack:dockerRuntime.daemonJson"),
        ({"dockerRuntime": {"dockerHost": "tcp://1.2.3.4:2375"}}, "only unix:///path sockets"),
        ({"dockerRuntime": {"restartDocker": True}}, "gcu-stack:dockerRuntime.restartDocker: unknown field"),
        ({"gcuNodes": {"driverLabel": "enflame.com/driver"}}, "expected key=value"),
        ({"gcuNodes": {"nodes": ["a"]}}, "gcu-stack:gcuNodes.nodes: unknown field (did you mean names?)"),
    ],
)
def test_bad_provider_settings_name_the_setting(config, expected):
    fails({"blueprint": str(SEED_BLUEPRINT), **config}, expected)
