"""The object rules (components/plan/rules.py): a blueprint that validates declares only objects that deploy.

Bad inputs fail before anything is declared, naming the field, what its value is used for and
what to do; unusual but legal inputs (digests, long names, dots where allowed) are accepted.
"""

import asyncio
import json

import harness
import pulumi
import pytest
from harness import DIGEST, PASSWORD, full_spec, run_program, seed_spec
from k8s_schema import normalise, validate_all

from components.manifests import label_value, replaced_delete_first
from components.names import FRONTS_ANNOTATION
from components.plan import objects
from components.settings import load_settings

OTHER_DIGEST = "sha256:" + "fedcba9876543210" * 4
NIGHTINGALE = {"nightingaleDbPassword": PASSWORD}


def run(spec: dict, **config):
    return run_program({"spec": spec, **NIGHTINGALE, **config}, secret_keys=("nightingaleDbPassword",))


def bad(spec: dict, *expected: str, **config) -> str:
    """Like harness.fails, with the database password set as a secret (as users must)."""
    with pytest.raises(pulumi.RunError) as caught:
        run(spec, **config)
    message = str(caught.value)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    assert [r.type for r in caught.value.registrations] == ["pulumi:pulumi:Stack"], "declared something before failing"
    return message


def settings_for(spec: dict, **config):
    values = {f"gcu-stack:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in {"spec": spec, **NIGHTINGALE, **config}.items()}
    return load_settings(values, harness.PROJECT_DIR, frozenset({"gcu-stack:nightingaleDbPassword"}))


def settle() -> None:
    """Let the event loop finish what building a plan outside a program left on it (the password's Output),
    so that nothing of it runs inside the next program."""
    loop = asyncio.get_event_loop()
    for _ in range(5):
        loop.run_until_complete(asyncio.sleep(0))


def comparable(manifest: dict) -> dict:
    manifest = normalise(manifest)
    annotations = manifest["metadata"].get("annotations", {})
    if FRONTS_ANNOTATION in annotations:
        # The fronted workload's deployed ID: the program knows it, the plan (made before anything exists) cannot.
        assert manifest["kind"] == "Service" and manifest["spec"]["type"] == "NodePort", manifest
        rest = {k: v for k, v in annotations.items() if k != FRONTS_ANNOTATION}
        metadata = {k: v for k, v in manifest["metadata"].items() if k != "annotations"}
        manifest = {**manifest, "metadata": {**metadata, **({"annotations": rest} if rest else {})}}
    if manifest["kind"] == "Secret":  # the password is a Pulumi secret Output in the plan
        manifest = {**manifest, "stringData": sorted(manifest["stringData"])}
    return manifest


def key(manifest: dict) -> tuple:
    return manifest["apiVersion"], manifest["kind"], manifest["metadata"].get("namespace"), manifest["metadata"]["name"]


@pytest.mark.parametrize(
    "spec, config",
    [
        (seed_spec(), {}),
        (full_spec(), {}),
        (full_spec(**{"devicePlugin.notDeploy": False, "gcusharePlugin.notDeploy": True, "driver.notDeploy": False}), {"exporterServiceMonitor": True}),
        (full_spec(**{"gfd.name": "g" * 200, "exporter.version": DIGEST, "nightingale.agentd-deploy": {"name": "a" * 120}}), {}),
    ],
    ids=["seed", "full", "device-plugin-driver-monitor", "long-names-digest"],
)
def test_the_plan_is_exactly_what_the_program_declares(spec, config):
    declared = {key(r.manifest): comparable(r.manifest) for r in run(spec, **config).k8s()}
    planned = {key(p.manifest): comparable(p.manifest) for p in objects.build(settings_for(spec, **config)).objects}
    settle()
    assert set(planned) == set(declared)
    for name, manifest in declared.items():
        assert planned[name] == manifest, name


# ---------------------------------------------------------------------------- names, by where they end up


@pytest.mark.parametrize(
    "changes, expected",
    [
        # A Service is named after its workload: DNS-1035 (no dots, a letter first, at most 63).
        ({"exporter.name": "enflame.gcu.exporter"}, ["spec.exporter.name: gives the Service kube-system/enflame.gcu.exporter", "DNS-1035", "'enflame-gcu-exporter'"]),
        ({"exporter.name": "9-exporter"}, ["spec.exporter.name", "Service", "starting with a letter"]),
        ({"exporter.name": "e" * 64}, ["spec.exporter.name", "Service", "(64 characters)", "use at most 63"]),
        ({"gcushareScheduler.name": "x" * 70}, ["spec.gcushareScheduler.name", "Service", "use at most 63"]),
        ({"nightingale.nwebapi-deploy": {"name": "web.ui"}}, ["spec.nightingale.nwebapi-deploy.name", "Service enflame/web.ui", "'web-ui'"]),
        ({"nightingale.redis-deploy": {"name": "r" * 64}}, ["spec.nightingale.redis-deploy.name", "Service"]),
        # Derived names must fit too: NFD's ConfigMap is `<name>-config`.
        ({"nfd.name": "n" * 250}, ["spec.nfd.name", "ConfigMap", "use at most 246 characters", "'-config'"]),
        ({"nightingale.name": "n" * 252}, ["spec.nightingale.name", "Secret", "'-db'"]),
        # A Deployment's ReplicaSets are `<name>-<hash>`.
        ({"nightingale.agentd-deploy": {"name": "a" * 250}}, ["spec.nightingale.agentd-deploy.name", "Deployment", "use at most 242"]),
        # Helm release names: Volcano's chart names its admission Service after it.
        ({"volcano.name": "v" * 46}, ["spec.volcano.name", "Volcano Helm release", "at most 45"]),
        ({"volcano.name": "volcano.v2"}, ["spec.volcano.name", "DNS-1035"]),
    ],
)
def test_a_name_that_cannot_name_every_object_it_names_is_refused(changes, expected):
    bad(full_spec(**changes), *expected)


def test_long_names_where_kubernetes_allows_them_are_accepted_and_labels_are_derived():
    name = "enflame-gcu-feature-discovery-" + "x" * 150
    run_ = run(full_spec(**{"gfd.name": name}))
    daemonset = run_.one("DaemonSet", name)
    assert validate_all(run_) > 0
    labels = daemonset.inputs["metadata"]["labels"]
    selector = daemonset.inputs["spec"]["selector"]["matchLabels"]
    template = daemonset.inputs["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == selector["app.kubernetes.io/name"] == template["app.kubernetes.io/name"]
    assert len(selector["app.kubernetes.io/name"]) == 63 and selector["app.kubernetes.io/name"].startswith("enflame-gcu-feature-discovery-x")
    assert run_.one("ClusterRole", name) and run_.one("ServiceAccount", name)


def test_a_long_resource_name_becomes_a_derived_instance_label(tmp_path):
    document = {**harness.SEED, "metadata": {"name": "enflame-gcu-resource." + "a" * 100}}
    path = tmp_path / "gr.json"
    path.write_text(json.dumps(document))
    run_ = run_program({"blueprint": str(path)})
    instances = {r.inputs["metadata"]["labels"]["app.kubernetes.io/instance"] for r in run_.k8s() if "labels" in r.inputs["metadata"]}
    assert len(instances) == 1 and len(instances.pop()) == 63
    validate_all(run_)


def test_label_values_are_kept_when_they_fit_and_derived_distinctly_when_not():
    assert label_value("enflame-gcu-exporter") == "enflame-gcu-exporter"
    assert label_value("a" * 63) == "a" * 63
    long_a, long_b = "a" * 60 + ".b" * 20, "a" * 60 + ".c" * 20
    assert label_value(long_a) != label_value(long_b)
    for value in (long_a, long_b, "x" * 253, "a." * 40 + "z", "-" * 70):
        derived = label_value(value)
        assert len(derived) <= 63 and derived[0].isalnum() and derived[-1].isalnum(), derived
        assert label_value(value) == derived  # stable across runs


# ---------------------------------------------------------------------------- collisions


@pytest.mark.parametrize(
    "changes, expected",
    [
        # Cluster-scoped RBAC of components in different namespaces.
        (
            {"gfd.name": "gcu-agent", "gcushareScheduler.name": "gcu-agent", "gcushareScheduler.namespace": "gcu-share"},
            ["spec.gfd.name and spec.gcushareScheduler.name both name the ClusterRole 'gcu-agent' (cluster-wide"],
        ),
        # Two Nightingale parts; the unset one is named with its default.
        (
            {"nightingale.redis-deploy": {"name": "mysql"}},
            ["spec.nightingale.mysql-deploy.name (unset: default 'mysql') and spec.nightingale.redis-deploy.name both name the Deployment enflame/mysql"],
        ),
        # Two components in one namespace.
        ({"exporter.name": "enflame-gcu-feature-discovery"}, ["both name the DaemonSet kube-system/enflame-gcu-feature-discovery", "spec.exporter", "spec.gfd"]),
        # Nightingale moved into kube-system, a part named like the exporter: their Services collide.
        (
            {"nightingale.namespace": "kube-system", "nightingale.prometheus-deploy": {"name": "enflame-gcu-exporter"}},
            ["both name the Service kube-system/enflame-gcu-exporter"],
        ),
        # A name the catalog fixes (NFD's ClusterRole keeps gcu-operator's name).
        ({"gcushareScheduler.name": "nfd-clusterrole"}, ["spec.nfd (fixed name 'nfd-clusterrole') and spec.gcushareScheduler.name both name the ClusterRole"]),
    ],
)
def test_collisions_are_refused_naming_both_fields(changes, expected):
    message = bad(full_spec(**changes), *expected)
    assert "give one of them another name" in message


def test_the_same_name_in_two_namespaces_is_fine_for_namespaced_objects():
    spec = full_spec(**{"nightingale.agentd-deploy": {"name": "enflame-gcu-exporter"}})
    run_ = run(spec)
    assert {r.inputs["metadata"]["namespace"] for r in run_.k8s() if r.k8s_name == "enflame-gcu-exporter" and r.inputs["kind"] != "Service"} == {"kube-system", "enflame"}


# ---------------------------------------------------------------------------- images and digests


def test_a_digest_version_pins_the_image():
    run_ = run(full_spec(**{"exporter.version": DIGEST}))
    container = harness.pod_spec(run_.one("DaemonSet", "enflame-gcu-exporter"))["containers"][0]
    assert container["image"] == f"{harness.ENFLAME_REPO}/gcu-exporter@{DIGEST}"


def test_an_image_pinned_by_digest_keeps_an_explicit_tag_and_drops_the_default_one():
    pinned = run(full_spec(**{"exporter.image": f"gcu-exporter@{DIGEST}", "exporter.version": "2.1.0"}))
    assert harness.pod_spec(pinned.one("DaemonSet", "enflame-gcu-exporter"))["containers"][0]["image"] == f"{harness.ENFLAME_REPO}/gcu-exporter:2.1.0@{DIGEST}"
    spec = full_spec(**{"exporter.image": f"gcu-exporter@{DIGEST}", "exporter.version": harness.DELETE})
    digest_only = run(spec)
    assert harness.pod_spec(digest_only.one("DaemonSet", "enflame-gcu-exporter"))["containers"][0]["image"] == f"{harness.ENFLAME_REPO}/gcu-exporter@{DIGEST}"


def test_the_same_digest_twice_is_fine_and_two_different_ones_are_refused():
    run(full_spec(**{"exporter.image": f"gcu-exporter@{DIGEST}", "exporter.version": DIGEST}))
    bad(full_spec(**{"exporter.image": f"gcu-exporter@{DIGEST}", "exporter.version": OTHER_DIGEST}),
        "spec.exporter.image pins the digest", "spec.exporter.version pins", "keep one")


def test_a_sub_part_digest_with_first_level_precedence():
    spec = seed_spec(**{"nfd.version": DIGEST})
    run_ = run_program({"spec": spec})
    images = {c["name"]: c["image"] for c in harness.pod_spec(run_.one("DaemonSet", "enflame-node-feature-discovery"))["containers"]}
    assert images == {"nfd-master": f"{harness.ENFLAME_REPO}/node-feature-discovery@{DIGEST}", "nfd-worker": f"{harness.ENFLAME_REPO}/node-feature-discovery@{DIGEST}"}


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ("exporter.version", "sha256:" + "a" * 63, "a sha256 digest has 64 hex digits, not 63"),
        ("exporter.version", "sha256:" + "A" * 64, "must be lower-case hex"),
        ("exporter.version", "md5:" + "a" * 32, "is not a digest"),
        ("exporter.version", "-rc1", "spec.exporter.version"),
        ("exporter.image", "gcu-exporter@sha256:abc", "spec.exporter.image"),
        ("exporter.image", "gcu-exporter:2.0", "set the tag in `version`"),
        ("exporter.image", "gcu..exporter", "spec.exporter.image"),
        ("exporter.image", "team/Exporter", "spec.exporter.image"),
        ("exporter.repository", "registry..example.com/gcu", "registry host 'registry..example.com' is not valid"),
        ("exporter.repository", "registry.example.com/gcu..team", "path part 'gcu..team' is not valid"),
        ("exporter.repository", "registry.example.com/gcu._team", "path part"),
        ("exporter.repository", "https://registry.example.com", "no scheme"),
        ("exporter.repository", "registry.example.com//gcu", "empty part"),
        ("exporter.repository", "-registry.example.com/gcu", "registry host"),
    ],
)
def test_image_parts_the_kubelet_would_refuse_are_refused(path, value, expected):
    bad(full_spec(**{path: value}), f"spec.{path}", expected)


def test_an_image_name_over_255_characters_names_its_parts():
    spec = full_spec(**{"exporter.repository": "registry.example.com/" + "r" * 200, "exporter.image": "gcu-" + "e" * 60})
    bad(spec, "spec.exporter.repository, spec.exporter.image and spec.exporter.version make the image reference", "the most is 255")


@pytest.mark.parametrize(
    "repository",
    ["localhost:5000/gcu", "registry.example.com:443/a__b/c---d/e.f", "10.0.0.1:5000/gcu", "[fd00::1]:5000/gcu", "Registry.Example.COM/gcu", "gcu_team"],
)
def test_unusual_but_valid_repositories_are_accepted(repository):
    run_ = run(full_spec(**{"exporter.repository": repository}))
    image = harness.pod_spec(run_.one("DaemonSet", "enflame-gcu-exporter"))["containers"][0]["image"]
    assert image == f"{repository}/gcu-exporter:latest"


def test_volcano_cannot_pin_digests_its_chart_takes_a_tag():
    bad(full_spec(**{"volcano.version": DIGEST}), "spec.volcano.version: Volcano's chart takes a tag")
    bad(full_spec(**{"volcano.scheduler": {"image": f"vc-scheduler@{DIGEST}"}}), "spec.volcano.scheduler.image", "cannot carry a digest")


# ---------------------------------------------------------------------------- env and paths


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"exporter.env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "spec.exporter.env[1].name: 'A' is already set by env[0]"),
        ({"exporter.env": [{"name": "NODE_NAME", "value": "x"}]}, "spec.exporter.env[0].name: 'NODE_NAME' is set by gcu-stack itself"),
        ({"gcusharePlugin.env": [{"name": "X", "value": "1"}, {"name": "MEMORY_UNIT", "value": "2"}]}, "spec.gcusharePlugin.env[1].name: 'MEMORY_UNIT' is set by gcu-stack itself (to '1')"),
        ({"nightingale.mysql-deploy": {"env": [{"name": "MYSQL_ROOT_PASSWORD", "value": "x"}]}}, "spec.nightingale.mysql-deploy.env[0].name: 'MYSQL_ROOT_PASSWORD' is set by gcu-stack itself (from {'secretKeyRef'"),
        ({"nightingale.env": [{"name": "REDIS_ADDR", "value": "x"}]}, "spec.nightingale.env[0].name: 'REDIS_ADDR'"),
        ({"toolkit.env": [{"name": "RUNTIME_ACTIVATION", "value": "none"}]}, "spec.toolkit.env[0].name: 'RUNTIME_ACTIVATION' is set by gcu-stack itself"),
        ({"exporter.env": [{"name": "..HOME", "value": "x"}]}, "spec.exporter.env[0].name"),
        ({"exporter.env": [{"name": "1ABC", "value": "x"}]}, "spec.exporter.env[0].name"),
    ],
)
def test_env_names_are_unique_per_container(changes, expected):
    message = bad(full_spec(**changes), expected)
    assert "remove it" in message or "keep one" in message or "not an environment variable name" in message


def test_an_env_clash_reaching_many_containers_is_one_message():
    message = bad(full_spec(**{"nightingale.env": [{"name": "MYSQL_HOST", "value": "x"}]}), "spec.nightingale.env[0].name: 'MYSQL_HOST'")
    assert message.count("\n  - ") == 1 and "agentd" in message and "nwebapi" in message


def test_unusual_env_names_and_values_are_accepted():
    env = [{"name": "my.env-name", "value": 1}, {"name": "_X", "value": True}, {"name": "Path.Like_Name", "value": "a=b; c"}]
    run_ = run(full_spec(**{"exporter.env": env}))
    names = [e["name"] for e in harness.pod_spec(run_.one("DaemonSet", "enflame-gcu-exporter"))["containers"][0]["env"]]
    assert names[:3] == ["my.env-name", "_X", "Path.Like_Name"] and names[-1] == "NODE_NAME"


@pytest.mark.parametrize("hostpath", ["/var/lib/../etc", "/..", "/var/lib/mysql/..", "/var/lib/\nmysql", "/" + "d" * 256, "/d" * 2100])
def test_a_host_path_with_dot_dot_is_refused(hostpath):
    bad(full_spec(**{"nightingale.mysql-pv": {"hostpath": hostpath}}), "spec.nightingale.mysql-pv.hostpath", "use a plain absolute path")


@pytest.mark.parametrize("hostpath", ["/var/lib/./mysql", "/data//mysql/", "/var/lib/my..sql", "/srv/gcu data"])
def test_odd_but_legal_host_paths_are_accepted(hostpath):
    run_ = run(full_spec(**{"nightingale.mysql-pv": {"hostpath": hostpath}}))
    assert run_.one("PersistentVolume", "mysql-pv").inputs["spec"]["hostPath"]["path"] == hostpath


def test_gcushare_nodes_must_fit_the_hostname_label_they_are_matched_against():
    bad(full_spec(**{"gcusharePlugin.gcushareNodes": ["node-" + "x" * 60]}), "spec.gcusharePlugin.gcushareNodes[0]", "kubernetes.io/hostname")
    run(full_spec(**{"gcusharePlugin.gcushareNodes": ["gcu-node-1.example.com"]}))


def test_every_problem_is_reported_at_once():
    spec = full_spec(**{"exporter.name": "a.b", "nightingale.mysql-pv": {"hostpath": "/x/../y"}, "gfd.name": "gcushare-scheduler-extender"})
    message = bad(spec, "spec.exporter.name", "spec.nightingale.mysql-pv.hostpath", "both name the ClusterRole 'gcushare-scheduler-extender'")
    assert message.count("\n  - ") >= 3


# ---------------------------------------------------------------------------- replacements


def test_objects_holding_something_unique_are_replaced_delete_first(monkeypatch):
    seen: dict[str, bool] = {}
    original = harness.RecordingMonitor.RegisterResource

    def record(self, request):
        seen[f"{request.type}::{request.name}"] = bool(request.deleteBeforeReplace)
        return original(self, request)

    monkeypatch.setattr(harness.RecordingMonitor, "RegisterResource", record)
    run(full_spec())
    first = {name for name, flag in seen.items() if flag}
    assert {n.split("::")[1] for n in first} >= {
        "exporter-daemonset", "exporter-service", "nfd-daemonset", "gfd-daemonset", "toolkit-daemonset", "gcusharePlugin-daemonset",
        "gcushareScheduler-deployment", "gcushareScheduler-service", "nightingale-deployment-mysql", "nightingale-service-nwebapi",
        "volcano-release",
    }
    # ClusterIP Services, ConfigMaps, RBAC and storage are created before the old ones go (no downtime, nothing unique).
    assert not any(n.split("::")[1] in ("nightingale-service-redis", "exporter-serviceaccount", "nfd-configmap") for n in first)


@pytest.mark.parametrize(
    "manifest, expected",
    [
        ({"kind": "DaemonSet"}, True),
        ({"kind": "Deployment"}, True),
        ({"kind": "Service", "spec": {"type": "NodePort"}}, True),
        ({"kind": "Service", "spec": {"type": "ClusterIP"}}, False),
        ({"kind": "ConfigMap"}, False),
    ],
)
def test_which_kinds_are_replaced_delete_first(manifest, expected):
    assert replaced_delete_first(manifest) is expected
