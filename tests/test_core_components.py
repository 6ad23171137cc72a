"""What the program declares for the core components, for the seed blueprint and variants."""

import json

import pytest
import yaml

from harness import SEED_BLUEPRINT, ClusterMocks, run_program
from k8s_schema import normalise, validate_all
from test_config import DELETE, SEED, seed_spec

SEED_DAEMONSETS = {
    "nfd": "enflame-node-feature-discovery",
    "toolkit": "enflame-gcu-docker-plugin",
    "devicePlugin": "enflame-gcu-k8s-plugin",
    "exporter": "enflame-gcu-exporter",
    "gfd": "enflame-gcu-feature-discovery",
}
GCU_REPO = "artifact.enflame.cn/galaxy_docker_hub/gcu"
ENFLAME_REPO = "artifact.enflame.cn/enflame_docker_images/enflame"
SEED_IMAGES = {
    "enflame-gcu-docker-plugin": f"{GCU_REPO}/gcu-runtime:latest",
    "enflame-gcu-k8s-plugin": f"{GCU_REPO}/gcu-plugin:latest",
    "enflame-gcu-exporter": f"{ENFLAME_REPO}/gcu-exporter:latest",
    "enflame-gcu-feature-discovery": f"{GCU_REPO}/gcu-gfd:latest",
}


def pod_spec(registration):
    return registration.inputs["spec"]["template"]["spec"]


def daemonsets(run):
    return {r.k8s_name: r for r in run.k8s() if r.inputs["kind"] == "DaemonSet"}


@pytest.fixture(scope="module")
def seed_run():
    return run_program({"blueprint": str(SEED_BLUEPRINT)})


def test_seed_declares_exactly_the_seed_daemonsets(seed_run):
    found = daemonsets(seed_run)
    assert set(found) == set(SEED_DAEMONSETS.values())
    for key, name in SEED_DAEMONSETS.items():
        registration = found[name]
        assert registration.inputs["metadata"]["namespace"] == "kube-system"
        assert seed_run.by_urn(registration.parent).name == key
    for name, image in SEED_IMAGES.items():
        (container,) = pod_spec(found[name])["containers"]
        assert container["image"] == image
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert pod_spec(found[name])["nodeSelector"] == {"enflame.com/gcu.present": "true"}


def test_seed_nfd_runs_master_and_worker_on_every_node(seed_run):
    spec = pod_spec(seed_run.one("DaemonSet", "enflame-node-feature-discovery"))
    images = {c["name"]: c["image"] for c in spec["containers"]}
    assert images == {
        "nfd-master": f"{ENFLAME_REPO}/node-feature-discovery:v0.11.3",
        "nfd-worker": f"{ENFLAME_REPO}/node-feature-discovery:v0.11.3",
    }
    assert "nodeSelector" not in spec  # it is what finds GCU nodes, so it runs everywhere
    assert spec["serviceAccountName"] == "nfd-service-account"


def test_seed_nfd_owns_its_rbac_crd_and_gcu_rule(seed_run):
    for kind, name in [
        ("ServiceAccount", "nfd-service-account"),
        ("ClusterRole", "nfd-clusterrole"),
        ("ClusterRoleBinding", "nfd-clusterrolebinding"),
        ("CustomResourceDefinition", "nodefeaturerules.nfd.k8s-sigs.io"),
    ]:
        assert seed_run.by_urn(seed_run.one(kind, name).parent).name == "nfd"
    rule = seed_run.one("NodeFeatureRule", "enflame-gcu-present").inputs["spec"]["rules"][0]
    assert rule["labels"] == {"enflame.com/gcu.present": "true"}
    assert rule["matchFeatures"][0]["matchExpressions"]["vendor"]["value"] == ["1e36"]
    config = yaml.safe_load(seed_run.one("ConfigMap", "enflame-node-feature-discovery-config").inputs["data"]["nfd-worker.conf"])
    # Labelling by vendor alone yields feature.node.kubernetes.io/pci-1e36.present=true.
    assert config["sources"]["pci"]["deviceLabelFields"] == ["vendor"]
    master = pod_spec(seed_run.one("DaemonSet", "enflame-node-feature-discovery"))["containers"][0]
    assert "-extra-label-ns=enflame.com" in master["args"]
    # The rule waits for its CRD.
    crd = seed_run.one("CustomResourceDefinition", "nodefeaturerules.nfd.k8s-sigs.io")
    assert crd.urn in seed_run.one("NodeFeatureRule", "enflame-gcu-present").dependencies


def test_seed_skips_components_marked_not_deploy(seed_run):
    kinds = {(r.inputs["kind"], r.k8s_name) for r in seed_run.k8s()}
    assert ("DaemonSet", "enflame-gcu-driver") not in kinds
    components = {r.name for r in seed_run.registrations if r.type.startswith("gcu:components:")}
    assert components == set(SEED_DAEMONSETS)


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


def test_own_resources_list_every_object_of_the_component(seed_run):
    for status in seed_run.outputs["resourceStatuses"]:
        component = seed_run.component(status["name"])
        declared = {(r.inputs["kind"], r.k8s_name) for r in seed_run.children(component.urn) if r.type.startswith("kubernetes:")}
        listed = {(o["kind"], o["name"]) for o in status["ownResources"]}
        assert declared == listed


def test_seed_objects_are_valid_kubernetes(seed_run):
    assert validate_all(seed_run) >= 15


def test_node_agents_have_tolerations_priority_resources_and_rolling_updates(seed_run):
    for registration in daemonsets(seed_run).values():
        spec = registration.inputs["spec"]
        assert normalise(spec["updateStrategy"]) == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
        pod = spec["template"]["spec"]
        assert pod["priorityClassName"] == "system-node-critical"
        assert {"key": "enflame.com/gcu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        for container in pod["containers"]:
            assert set(container["resources"]["requests"]) == {"cpu", "memory"}
            assert set(container["resources"]["limits"]) == {"cpu", "memory"}


def test_only_host_changing_components_are_privileged(seed_run):
    privileged = {
        name
        for name, r in daemonsets(seed_run).items()
        if any(c["securityContext"].get("privileged") for c in pod_spec(r)["containers"])
    }
    assert privileged == {"enflame-gcu-docker-plugin"}


def test_device_plugin_mounts_the_kubelet_socket_dir_and_advertises_the_gcu_resource(seed_run):
    pod = pod_spec(seed_run.one("DaemonSet", "enflame-gcu-k8s-plugin"))
    paths = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert "/var/lib/kubelet/device-plugins" in paths
    assert "--resource-name=enflame.com/gcu" in pod["containers"][0]["args"]


def test_exporter_serves_metrics_on_node_port_30940(seed_run):
    service = normalise(seed_run.one("Service", "enflame-gcu-exporter").inputs)
    assert service["spec"]["type"] == "NodePort"
    (port,) = service["spec"]["ports"]
    assert port["nodePort"] == 30940 and port["targetPort"] == "metrics"
    assert service["spec"]["selector"] == seed_run.one("DaemonSet", "enflame-gcu-exporter").inputs["spec"]["selector"]["matchLabels"]
    assert not [r for r in seed_run.k8s() if r.inputs["kind"] == "ServiceMonitor"]


def test_exporter_service_monitor_behind_a_switch():
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "exporterServiceMonitor": True})
    monitor = run.one("ServiceMonitor", "enflame-gcu-exporter")
    assert monitor.inputs["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor.inputs["spec"]["endpoints"][0]["path"] == "/metrics"
    validate_all(run)


def test_gfd_gets_exactly_node_get_and_patch(seed_run):
    role = seed_run.one("ClusterRole", "enflame-gcu-feature-discovery")
    assert role.inputs["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = seed_run.one("ClusterRoleBinding", "enflame-gcu-feature-discovery")
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": "enflame-gcu-feature-discovery", "namespace": "kube-system"}
    ]
    assert pod_spec(seed_run.one("DaemonSet", "enflame-gcu-feature-discovery"))["serviceAccountName"] == "enflame-gcu-feature-discovery"


def test_components_without_rbac_get_no_token(seed_run):
    assert pod_spec(seed_run.one("DaemonSet", "enflame-gcu-exporter"))["automountServiceAccountToken"] is False


def test_driver_on_is_privileged_with_env_from_spec():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    pod = pod_spec(run.one("DaemonSet", "enflame-gcu-driver"))
    (container,) = pod["containers"]
    assert container["image"] == f"{GCU_REPO}/gcu-driver:latest"
    assert container["securityContext"]["privileged"] is True
    assert {"name": "WITH_REBOOT", "value": "false"} in container["env"]
    assert pod["hostPID"] is True
    assert "/lib/modules" in {v["hostPath"]["path"] for v in pod["volumes"]}
    assert run.outputs["readyResource"] == "6/6"
    validate_all(run)


def test_overrides_of_name_namespace_repository_version_env_and_selector():
    spec = seed_spec(
        **{
            "exporter.name": "my-exporter",
            "exporter.namespace": "gcu-monitoring",
            "exporter.repository": "registry.local:5000/gcu",
            "exporter.version": "2.3.1",
            "exporter.imagePullPolicy": "Always",
            "exporter.env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "PORT_OVERRIDE", "value": 9400}],
            "exporter.nodeSelector": {"pool": "gcu"},
        }
    )
    run = run_program({"spec": spec})
    ds = run.one("DaemonSet", "my-exporter")
    assert ds.inputs["metadata"]["namespace"] == "gcu-monitoring"
    pod = pod_spec(ds)
    (container,) = pod["containers"]
    assert container["image"] == "registry.local:5000/gcu/gcu-exporter:2.3.1"
    assert container["imagePullPolicy"] == "Always"
    assert {"name": "LOG_LEVEL", "value": "debug"} in container["env"]
    assert {"name": "PORT_OVERRIDE", "value": "9400"} in container["env"]
    assert pod["nodeSelector"] == {"pool": "gcu"}
    service = run.one("Service", "my-exporter")
    assert service.inputs["metadata"]["namespace"] == "gcu-monitoring"
    # The stack creates a namespace it needs; host-mounting agents need the privileged PSA level.
    namespace = run.one("Namespace", "gcu-monitoring")
    assert namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace.urn in ds.dependencies
    status = next(s for s in run.outputs["resourceStatuses"] if s["name"] == "exporter")
    assert status["namespace"] == "gcu-monitoring"
    validate_all(run)


def test_defaults_apply_when_the_spec_gives_only_the_key():
    run = run_program({"spec": {"toolkit": {}, "nfd": {}}})
    toolkit = run.one("DaemonSet", "enflame-gcu-docker-plugin")
    assert pod_spec(toolkit)["containers"][0]["image"] == f"{ENFLAME_REPO}/gcu-runtime:latest"
    assert toolkit.inputs["metadata"]["namespace"] == "kube-system"
    assert pod_spec(toolkit)["nodeSelector"] == {"enflame.com/gcu.present": "true"}
    # The seed's field table: NFD's default controller name.
    nfd = run.one("DaemonSet", "node-feature-discovery-ds")
    assert [c["image"] for c in pod_spec(nfd)["containers"]] == [f"{ENFLAME_REPO}/node-feature-discovery:latest"] * 2
    assert run.outputs["readyResource"] == "2/2"


def test_nfd_first_level_field_wins_over_the_sub_part_as_in_gcu_operator():
    spec = seed_spec(**{"nfd.repository": "mirror.local/nfd", "nfd.master.version": "v0.12.0"})
    run = run_program({"spec": spec})
    containers = {c["name"]: c["image"] for c in pod_spec(run.one("DaemonSet", "enflame-node-feature-discovery"))["containers"]}
    # nfd.repository (first level) overrides master/worker.repository; master's own version
    # applies because the first level does not set one.
    assert containers == {
        "nfd-master": "mirror.local/nfd/node-feature-discovery:v0.12.0",
        "nfd-worker": "mirror.local/nfd/node-feature-discovery:v0.11.3",
    }


def test_plugin_is_another_name_for_device_plugin():
    spec = seed_spec(devicePlugin=DELETE)
    spec["plugin"] = SEED["spec"]["devicePlugin"]
    run = run_program({"spec": spec})
    assert run.component("devicePlugin")
    assert run.one("DaemonSet", "enflame-gcu-k8s-plugin")
    assert run.outputs["readyResource"] == "5/5"


def test_yaml_blueprint_file(tmp_path):
    path = tmp_path / "gcu-resource.yaml"
    path.write_text(yaml.safe_dump(SEED))
    run = run_program({"blueprint": str(path)})
    assert set(daemonsets(run)) == set(SEED_DAEMONSETS.values())


def test_inline_spec_matches_the_file(seed_run):
    run = run_program({"spec": SEED["spec"]})
    assert {r.urn: normalise(r.inputs) for r in run.k8s()} == {r.urn: normalise(r.inputs) for r in seed_run.k8s()}


def test_inline_spec_name_setting_names_the_resource():
    run = run_program({"spec": SEED["spec"], "name": "lab-a"})
    assert any(r.type == "gcu:stack:GcuResource" and r.name == "lab-a" for r in run.registrations)
    assert run.one("DaemonSet", "enflame-gcu-exporter").inputs["metadata"]["labels"]["app.kubernetes.io/instance"] == "lab-a"


def test_empty_spec_declares_no_objects():
    run = run_program({"spec": {}})
    assert run.k8s() == []
    assert run.outputs["readyResource"] == "0/0"
    assert run.outputs["resourceStatuses"] == []


def test_every_kubernetes_object_uses_the_one_explicit_provider(seed_run):
    (provider,) = seed_run.of_type("pulumi:providers:kubernetes")
    for registration in seed_run.k8s():
        assert registration.provider.startswith(provider.urn + "::")
    for component in [r for r in seed_run.registrations if r.type.startswith("gcu:components:")]:
        assert component.providers["kubernetes"].startswith(provider.urn + "::")


def test_kubeconfig_and_context_reach_the_provider(tmp_path):
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "kubeconfig": "/etc/gcu/kubeconfig", "kubeContext": "lab"})
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "/etc/gcu/kubeconfig"
    assert provider.inputs["context"] == "lab"


def test_component_type_tokens(seed_run):
    tokens = {r.name: r.type for r in seed_run.registrations if r.type.startswith("gcu:")}
    assert tokens == {
        "enflame-gcu-resource": "gcu:stack:GcuResource",
        "nfd": "gcu:components:NodeFeatureDiscovery",
        "toolkit": "gcu:components:Toolkit",
        "devicePlugin": "gcu:components:DevicePlugin",
        "exporter": "gcu:components:Exporter",
        "gfd": "gcu:components:GcuFeatureDiscovery",
    }


@pytest.mark.parametrize(
    "changes",
    [
        {"driver.notDeploy": False},
        {"nfd.notDeploy": True, "exporter.namespace": "gcu-exporter"},
        {"toolkit.env": [{"name": "RUNTIME_DEBUG", "value": "1"}]},
        {"gfd.nodeSelector": {"enflame.com/gcu.model": "T10"}, "gfd.name": "gfd"},
    ],
)
def test_variants_are_valid_kubernetes(changes):
    validate_all(run_program({"spec": seed_spec(**changes)}))


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


def test_seed_json_and_inline_config_text_round_trip():
    # Pulumi hands object config to the program as JSON text.
    run = run_program({"spec": json.dumps(SEED["spec"])})
    assert run.outputs["readyResource"] == "5/5"
