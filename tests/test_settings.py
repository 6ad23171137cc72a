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
        # checked before anything is declared, not found mid-`up` (after a node is cordoned)
        ({"driverUpgrade": {"waitForCompletion": {"selector": "app in (a,"}}},
         "gcu-stack:driverUpgrade.waitForCompletion.selector: 'app in (a,' is not a label selector: a '(' is not closed"),
        ({"driverUpgrade": {"waitForCompletion": {"selector": "app=train ing"}}},
         "gcu-stack:driverUpgrade.waitForCompletion.selector: 'app=train ing' is not a label selector"),
        ({"driverUpgrade": {"waitForCompletion": {"selector": "tier notin (web api)"}}}, "'web api' is not a label value"),
        ({"validation": {"image": "registry.local/gcu selfcheck:1"}},
         "gcu-stack:validation.image: 'registry.local/gcu selfcheck:1' is not an image reference"),
        ({"gcuNodes": {"selector": {"gcu pool": "a"}}}, "gcu-stack:gcuNodes.selector: label key 'gcu pool'"),
        ({"gcuNodes": {"selector": {"pool": "a b"}}}, "gcu-stack:gcuNodes.selector: label value 'a b'"),
        ({"gcuNodes": {"names": ["gcu-node-1", "Node_1"]}}, "gcu-stack:gcuNodes.names: 'Node_1' cannot be a node name"),
        # found by tests/test_settings_properties.py: each failed only on the node, in the middle of an `up`
        ({"gcuNodes": {"driverLabel": "gcu driver=true"}}, "gcu-stack:gcuNodes.driverLabel: label key 'gcu driver'"),
        ({"containerd": {"restartCommand": []}}, "gcu-stack:containerd.restartCommand: a command is a non-empty list of non-empty words (got [])"),
        ({"dockerRuntime": {"restartCommand": ["systemctl", "", "docker"]}}, "gcu-stack:dockerRuntime.restartCommand"),
        ({"containerd": {"dropin": "/etc/containerd/conf.d/99\x00.toml"}}, "contains a control character"),
        # maintenance windows: each field named, before anything is declared
        ({"driverUpgrade": {"windows": [{"start": "25:00", "end": "05:00"}]}},
         "gcu-stack:driverUpgrade.windows[0].start: '25:00': a time of day as HH:MM"),
        ({"driverUpgrade": {"windows": [{"start": "01:00", "end": "05:00", "timeZone": "Asia/Shangai"}]}},
         "gcu-stack:driverUpgrade.windows[0].timeZone: 'Asia/Shangai' is not an IANA time zone"),
        ({"driverUpgrade": {"windows": [{"days": ["Saturday"], "start": "01:00", "end": "05:00"}]}},
         "gcu-stack:driverUpgrade.windows[0].days[0]"),
        ({"driverUpgrade": {"windows": [{"start": "03:00", "end": "03:00"}]}}, "a whole day is 00:00 to 24:00"),
        ({"driverUpgrade": {"windows": [{"start": "01:00"}]}}, "gcu-stack:driverUpgrade.windows[0].end"),
        ({"driverUpgrade": {"maxDurationMinutes": -5}}, "gcu-stack:driverUpgrade.maxDurationMinutes"),
        ({"driverUpgrade": {"onFailure": "revert"}}, "gcu-stack:driverUpgrade.onFailure: must be one of halt, rollback (got 'revert')"),
    ],
)
def test_bad_provider_settings_name_the_setting(config, expected):
    fails({"blueprint": str(SEED_BLUEPRINT), **config}, expected)


@pytest.mark.parametrize("selector", ["", "app=training", "app==training,tier!=web", "app in (a, b),!preemptible",
                                      "team notin (x),gpu", "rank>2", "example.com/job in(a)"])
def test_label_selectors_the_api_server_takes_are_taken(selector):
    from components.spec import label_selector_problem

    assert label_selector_problem(selector) is None


# ---------------------------------------------------------------------------- file encodings and duplicate keys


def test_a_gbk_file_with_a_chinese_comment_names_file_key_and_fix(tmp_path):
    path = tmp_path / "gr.yaml"
    text = "# 燧原 GCU 资源配置\n" + yaml.safe_dump(SEED)
    path.write_bytes(text.encode("gbk"))
    message = fails({"blueprint": str(path)}, "gcu-stack:blueprint", str(path), "is not UTF-8 text", "line 1", "save", "UTF-8", "iconv -f GBK -t UTF-8")
    assert "UnicodeDecodeError" not in message


def test_the_same_file_saved_as_utf8_deploys(tmp_path):
    path = tmp_path / "gr.yaml"
    path.write_text("# 燧原 GCU 资源配置\n" + yaml.safe_dump(SEED, allow_unicode=True), encoding="utf-8")
    assert run_program({"blueprint": str(path)}).outputs["readyResource"] == "5/5"


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_utf8_byte_order_mark_is_accepted(tmp_path, suffix):
    path = tmp_path / f"gr{suffix}"
    body = json.dumps(SEED) if suffix == ".json" else yaml.safe_dump(SEED)
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert run_program({"blueprint": str(path)}).outputs["readyResource"] == "5/5"


def test_a_utf16_file_is_named_not_misread(tmp_path):
    path = tmp_path / "gr.json"
    path.write_text(json.dumps(SEED), encoding="utf-16")
    fails({"blueprint": str(path)}, "gcu-stack:blueprint", "is UTF-16 text", "saved as UTF-8")


def test_a_binary_file_is_refused_with_its_name(tmp_path):
    path = tmp_path / "gr.json"
    path.write_bytes(bytes(range(256)) * 4)
    fails({"blueprint": str(path)}, "gcu-stack:blueprint", str(path), "not UTF-8")


def test_a_file_with_control_characters_is_refused(tmp_path):
    path = tmp_path / "gr.yaml"
    path.write_bytes(yaml.safe_dump(SEED).encode() + b"\x00\x00\x00")
    fails({"blueprint": str(path)}, "gcu-stack:blueprint", "control character", "line")


def test_a_directory_is_named(tmp_path):
    fails({"blueprint": str(tmp_path)}, "gcu-stack:blueprint", "is a directory")


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("gr.yaml", "apiVersion: topsops.enflame.com/v1\nkind: GcuResource\nmetadata:\n  name: a\nmetadata:\n  name: b\n", "key 'metadata' is given twice (lines 3 and 5)"),
        ("gr.yaml", "apiVersion: topsops.enflame.com/v1\nkind: GcuResource\nmetadata: {name: a, name: b}\n", "key 'name' is given twice"),
        ("gr.json", '{"apiVersion": "topsops.enflame.com/v1", "kind": "GcuResource", "kind": "GcuResource", "metadata": {"name": "a"}}', "key 'kind' is given twice"),
    ],
)
def test_a_key_given_twice_is_refused_not_silently_overridden(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    fails({"blueprint": str(path)}, str(path), expected)


def test_yaml_anchors_and_merge_keys_still_work(tmp_path):
    # A merged key overridden in the mapping itself is YAML's own rule, not a key given twice.
    path = tmp_path / "gr.yaml"
    path.write_text(
        "apiVersion: topsops.enflame.com/v1\nkind: GcuResource\nmetadata:\n  name: enflame-gcu-resource\nspec:\n"
        "  devicePlugin: &agent\n    image: gcu-plugin\n    version: '2.0'\n    repository: artifact.enflame.cn/galaxy_docker_hub/gcu\n"
        "  exporter:\n    <<: *agent\n    image: gcu-exporter\n"
    )
    run = run_program({"blueprint": str(path)})
    images = [c["image"] for d in daemonsets(run).values() for c in d.inputs["spec"]["template"]["spec"]["containers"]]
    assert "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-exporter:2.0" in images


def test_an_invalid_inline_name_names_its_setting():
    fails({"spec": SEED["spec"], "name": "Enflame GCU"}, "gcu-stack:name (metadata.name): 'Enflame GCU' is not a lowercase RFC 1123 name")


def test_reading_the_settings_loads_no_engine_code():
    """Parsing config (the blueprint and every gcu-stack:* setting, as the policy pack and tools do) imports no dynamic
    provider: components/providers/ is engine code, loaded only when the stack is declared."""
    import subprocess
    import sys

    from realservers import PROJECT_DIR

    probe = (
        "import sys; from pathlib import Path; from components.settings import load_settings; "
        f"settings = load_settings({{'gcu-stack:blueprint': {str(SEED_BLUEPRINT)!r}, "
        "'gcu-stack:driverUpgrade': '{\"maxParallel\": 2}', 'gcu-stack:validation': '{\"mode\": \"warn\"}'}, Path('.')); "
        "settings.deployed(); "
        "print(sorted(m for m in sys.modules if m.startswith('components.providers') or m == 'kubernetes'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
