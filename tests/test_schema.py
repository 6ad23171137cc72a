"""The blueprint's JSON Schema (blueprints/gcu-resource.schema.json): current, valid, and true to the program."""

import json

import jsonschema
import pytest
import yaml
from harness import SEED, SEED_BLUEPRINT, run_program, seed_spec

from components import schema

SHIPPED = schema.SCHEMA_FILE


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SHIPPED.read_text()))


def test_the_shipped_schema_is_what_the_models_generate():
    assert SHIPPED.read_text() == schema.render(), (
        "blueprints/gcu-resource.schema.json is stale: run `python -m components.schema > blueprints/gcu-resource.schema.json`"
    )


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(json.loads(SHIPPED.read_text()))


def test_the_seed_blueprint_validates_against_it():
    validator().validate(SEED)


def test_a_blueprint_naming_the_schema_validates_in_the_schema_and_in_the_program(tmp_path):
    document = {"$schema": "./gcu-resource.schema.json", **SEED}
    validator().validate(document)
    path = tmp_path / "gr.json"
    path.write_text(json.dumps(document))
    assert run_program({"blueprint": str(path)}).outputs["readyResource"] == "5/5"


def test_a_yaml_blueprint_with_the_editor_comment_runs(tmp_path):
    path = tmp_path / "gr.yaml"
    path.write_text("# yaml-language-server: $schema=./gcu-resource.schema.json\n" + yaml.safe_dump(SEED))
    assert run_program({"blueprint": str(path)}).outputs["readyResource"] == "5/5"


@pytest.mark.parametrize(
    "change, where",
    [
        ({"exporter.imagePulPolicy": "Always"}, "imagePulPolicy"),
        ({"exporter.imagePullPolicy": "Sometimes"}, "Sometimes"),
        ({"exporter.name": "Enflame_Exporter"}, "Enflame_Exporter"),
        ({"gcusharePlugin.memoryUnit": "0.5"}, "0.5"),
        ({"nightingale.mysql-pv": {"hostpath": "/x", "size": 1}}, "size"),
        ({"toolkit.env": [{"value": "1"}]}, "name"),
    ],
)
def test_the_schema_flags_what_editors_should(change, where):
    errors = list(validator().iter_errors({**SEED, "spec": seed_spec(**change)}))
    assert errors and any(where in str(e.message) or where in json.dumps(list(e.path)) for e in errors), [e.message for e in errors]


def test_old_names_and_yaml_scalars_are_in_the_schema():
    spec = seed_spec(devicePlugin=None)
    del spec["devicePlugin"]
    spec["plugin"] = SEED["spec"]["devicePlugin"]
    spec["driver"]["env"] = [{"name": "WITH_REBOOT", "value": False}, {"name": "RETRIES", "value": 3}]
    spec["gcusharePlugin"]["memoryUnit"] = 0.1
    validator().validate({**SEED, "spec": spec})


def test_the_shipped_file_is_plain_utf8_json():
    json.loads(SHIPPED.read_bytes().decode("utf-8"))
    assert SEED_BLUEPRINT.parent == SHIPPED.parent
