"""GCU feature discovery (components/catalog/gfd.py)."""

from harness import pod_spec


def test_gfd_gets_exactly_node_get_and_patch(seed_run):
    role = seed_run.one("ClusterRole", "enflame-gcu-feature-discovery")
    assert role.inputs["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = seed_run.one("ClusterRoleBinding", "enflame-gcu-feature-discovery")
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": "enflame-gcu-feature-discovery", "namespace": "kube-system"}
    ]
    assert pod_spec(seed_run.one("DaemonSet", "enflame-gcu-feature-discovery"))["serviceAccountName"] == "enflame-gcu-feature-discovery"
