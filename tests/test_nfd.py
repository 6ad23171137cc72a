"""Node Feature Discovery (components/catalog/nfd.py)."""

import yaml
from harness import ENFLAME_REPO, pod_spec, run_program, seed_spec


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


def test_the_static_manifests_beside_the_module_load_and_validate():
    import kubernetes_validate
    from k8s_schema import KUBERNETES_VERSION

    from components.catalog import nfd

    crd = nfd.crd({"app.kubernetes.io/part-of": "gcu-stack"})
    kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)
    assert crd["metadata"]["labels"] == {"app.kubernetes.io/part-of": "gcu-stack"}
    config = yaml.safe_load(nfd.WORKER_CONFIG.read_text())
    assert config["sources"]["pci"]["deviceClassWhitelist"] == ["03", "0b40", "12"]


# -- the layouts: the version the blueprint asks for chooses gRPC (gcu-operator's) or NodeFeature (NFD v0.14 on)

def nfd_run(version: str, **more):
    return run_program({"spec": seed_spec(**{"nfd.master.version": version, "nfd.worker.version": version, **more})})


def of_kind(run, kind: str) -> dict:
    return {r.k8s_name: r for r in run.k8s() if r.inputs.get("kind") == kind}


def test_a_current_nfd_runs_one_master_and_a_worker_per_node_through_node_feature_objects():
    run = nfd_run("v0.17.3")
    master, worker = pod_spec(run.one("Deployment", "nfd-master")), pod_spec(run.one("DaemonSet", "nfd-worker"))
    assert [c["name"] for c in master["containers"]] == ["nfd-master"]
    assert master["containers"][0]["readinessProbe"]["grpc"] == {"port": 8082}
    (container,) = worker["containers"]
    assert "-server=127.0.0.1:8080" not in container.get("args", [])   # no gRPC to a master any more
    # The NodeFeature it publishes is owned by its pod (NFD reads POD_NAME and POD_UID).
    assert {e["name"] for e in container["env"]} >= {"NODE_NAME", "POD_NAME", "POD_UID"}
    assert "nodeSelector" not in worker   # NFD runs everywhere: it is what finds the GCU nodes
    assert {v["hostPath"]["path"] for v in worker["volumes"] if "hostPath" in v} >= {"/sys", "/boot"}
    assert master["serviceAccountName"] == worker["serviceAccountName"] == "nfd-service-account"
    rules = run.one("ClusterRole", "nfd-clusterrole").inputs["rules"]
    assert any("nodefeatures" in r["resources"] and "create" in r["verbs"] for r in rules)
    crds = set(of_kind(run, "CustomResourceDefinition"))
    assert crds == {"nodefeatures.nfd.k8s-sigs.io", "nodefeaturegroups.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io"}
    # The same rule marks GCU nodes, in both layouts.
    rule = run.one("NodeFeatureRule", "enflame-gcu-present").inputs["spec"]["rules"][0]
    assert rule["labels"] == {"enflame.com/gcu.present": "true"}
    assert "enflame-node-feature-discovery" not in of_kind(run, "DaemonSet")


def test_the_seed_and_unreadable_versions_keep_gcu_operators_layout(caplog):
    assert "nfd-master" not in of_kind(nfd_run("latest"), "Deployment")
    digest = "sha256:" + "ab" * 32
    run = nfd_run(digest)
    assert run.one("DaemonSet", "enflame-node-feature-discovery") and "nfd-master" not in of_kind(run, "Deployment")
    assert "spec.nfd.master.version" in caplog.text and "does not say which release" in caplog.text


def test_master_and_worker_of_different_layouts_are_refused_naming_both_fields():
    import pytest
    from pulumi.errors import RunError

    with pytest.raises(RunError) as refused:
        run_program({"spec": seed_spec(**{"nfd.master.version": "v0.17.3"})})
    message = str(refused.value)
    assert "spec.nfd.master.version (NodeFeature layout)" in message and "spec.nfd.worker.version (gRPC layout)" in message


def test_the_nfd_api_crds_validate_and_keep_their_own_annotations():
    import kubernetes_validate
    from k8s_schema import KUBERNETES_VERSION

    from components.catalog import nfd

    crds = nfd.api_crds({"app.kubernetes.io/part-of": "gcu-stack"})
    assert [c["spec"]["names"]["kind"] for c in crds] == ["NodeFeature", "NodeFeatureGroup", "NodeFeatureRule"]
    for crd in crds:
        kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)
        assert crd["metadata"]["annotations"]["controller-gen.kubebuilder.io/version"]


def test_pruning_takes_off_only_what_nfd_lists_as_its_own():
    from components.providers.nfd_labels import prune_patch

    node = {"metadata": {"name": "n", "resourceVersion": "7",
                         "labels": {"feature.node.kubernetes.io/pci-1e36.present": "true", "enflame.com/gcu.present": "true",
                                    "feature.node.kubernetes.io/by-hand": "true", "kubernetes.io/hostname": "n"},
                         "annotations": {"nfd.node.kubernetes.io/feature-labels": "pci-1e36.present,enflame.com/gcu.present",
                                         "other/annotation": "x"}}}
    assert prune_patch(node) == {"metadata": {
        "resourceVersion": "7",
        "labels": {"feature.node.kubernetes.io/pci-1e36.present": None, "enflame.com/gcu.present": None},
        "annotations": {"nfd.node.kubernetes.io/feature-labels": None}}}
    assert prune_patch({"metadata": {"name": "m", "resourceVersion": "1", "labels": {"a": "b"}}}) is None
