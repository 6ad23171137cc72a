"""The shared component builder (components/declare/component.py, manifests.py, resolve.py) on any catalog entry."""

import pytest
from harness import ENFLAME_REPO, GCU_REPO, SEED_BLUEPRINT, daemonsets, pod_spec, run_program, seed_spec
from k8s_schema import normalise, validate_all

SEED_DAEMONSETS = {
    "nfd": "enflame-node-feature-discovery",
    "toolkit": "enflame-gcu-docker-plugin",
    "devicePlugin": "enflame-gcu-k8s-plugin",
    "exporter": "enflame-gcu-exporter",
    "gfd": "enflame-gcu-feature-discovery",
}
SEED_IMAGES = {
    "enflame-gcu-docker-plugin": f"{GCU_REPO}/gcu-runtime:latest",
    "enflame-gcu-k8s-plugin": f"{GCU_REPO}/gcu-plugin:latest",
    "enflame-gcu-exporter": f"{ENFLAME_REPO}/gcu-exporter:latest",
    "enflame-gcu-feature-discovery": f"{GCU_REPO}/gcu-gfd:latest",
}


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


def test_seed_skips_components_marked_not_deploy(seed_run):
    kinds = {(r.inputs["kind"], r.k8s_name) for r in seed_run.k8s()}
    assert ("DaemonSet", "enflame-gcu-driver") not in kinds
    components = {r.name for r in seed_run.registrations if r.type.startswith("gcu:components:")}
    assert components == set(SEED_DAEMONSETS)


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


def test_components_without_rbac_get_no_token(seed_run):
    assert pod_spec(seed_run.one("DaemonSet", "enflame-gcu-exporter"))["automountServiceAccountToken"] is False


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


def test_deployments_count_as_available_only_with_a_ready_pod(full):
    # One replica: the rollout may never drop below it, or `pulumi up` would return before it serves.
    for name in ("agentd", "nserver", "nwebapi", "prometheus", "redis", "gcushare-scheduler-extender"):
        strategy = normalise(full.one("Deployment", name).inputs["spec"]["strategy"])
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    # MySQL owns a ReadWriteOnce volume: the old pod goes before the new one starts.
    assert full.one("Deployment", "mysql").inputs["spec"]["strategy"] == {"type": "Recreate"}


def test_every_object_is_valid_kubernetes(full):
    assert validate_all(full) > 30


def test_workload_waits_for_its_own_rbac_and_config():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    deps = set(run.one("DaemonSet", "enflame-node-feature-discovery").dependencies)
    for kind, name in [
        ("ServiceAccount", "nfd-service-account"),
        ("ClusterRoleBinding", "nfd-clusterrolebinding"),
        ("ConfigMap", "enflame-node-feature-discovery-config"),
        ("NodeFeatureRule", "enflame-gcu-present"),
    ]:
        assert run.one(kind, name).urn in deps


def test_containers_mounting_the_host_dev_keep_their_termination_log_out_of_it():
    """A kubelet mounts the termination log at /dev/termination-log by default: on a read-only host /dev the
    container cannot start (seen on a real kubelet), on a writable one it lands on the node."""
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    for registration in daemonsets(run).values():
        for container in pod_spec(registration)["containers"]:
            if any(m["mountPath"] == "/dev" for m in container.get("volumeMounts", [])):
                assert container["terminationMessagePath"] == "/tmp/termination-log", registration.k8s_name
            else:
                assert "terminationMessagePath" not in container
