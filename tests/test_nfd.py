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
