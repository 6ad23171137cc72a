"""Which cluster a stack acts on: the pinned kube target (components/kube_target.py), then the recorded identity
(ClusterGuard, components/providers/cluster_guard.py) and every bundled provider's check, against two real
control planes. The same refusals through the real engine: tests/test_engine_cluster_identity.py."""

from __future__ import annotations

import json

import pytest
from kubeconfigs import merged, use_context
from pulumi.runtime.rpc import UNKNOWN

from components.kube_target import pin
from components.providers.cluster import ClusterMismatch, checked_api, core_api, identify
from components.providers.cluster_guard import ClusterGuardProvider
from components.providers.node_labels import GcuNodesProvider

# ---------------------------------------------------------------------------- the pinned target


def test_pin_makes_the_ambient_current_context_explicit(tmp_path):
    first = merged(tmp_path / "config", {"a": _stub(tmp_path, "a"), "b": _stub(tmp_path, "b")}, current="b")
    assert pin(None, None, {"KUBECONFIG": str(first)}) == (str(first), "b")
    # A setting wins over the ambient choice.
    assert pin(None, "a", {"KUBECONFIG": str(first)}) == (str(first), "a")
    # ~/.kube/config when KUBECONFIG is unset or empty.
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(first.read_text())
    assert pin(None, None, {"HOME": str(home), "KUBECONFIG": ""}) == (str(home / ".kube" / "config"), "b")
    # Nothing at all: in-cluster credentials (a pod), nothing to pin.
    assert pin(None, None, {"HOME": str(tmp_path / "nobody")}) == (None, None)


def test_pin_takes_the_file_of_a_merged_kubeconfig_that_defines_the_context(tmp_path):
    one = merged(tmp_path / "one", {"a": _stub(tmp_path, "a")}, current="a")
    two = merged(tmp_path / "two", {"b": _stub(tmp_path, "b")}, current="b")
    # kubectl's merge: the first file that sets current-context says which; the file defining it is pinned.
    assert pin(None, None, {"KUBECONFIG": f"{one}:{two}"}) == (str(one), "a")
    assert pin(None, "b", {"KUBECONFIG": f"{one}:{two}"}) == (str(two), "b")


def test_pin_keeps_an_inline_kubeconfig_and_its_current_context(tmp_path):
    content = merged(tmp_path / "config", {"a": _stub(tmp_path, "a")}, current="a").read_text()
    assert pin(content, None, {}) == (content, "a")


def test_pin_makes_a_relative_setting_absolute(tmp_path, monkeypatch):
    merged(tmp_path / "config", {"a": _stub(tmp_path, "a")}, current="a")
    monkeypatch.chdir(tmp_path)
    assert pin("config", None, {}) == (str(tmp_path / "config"), "a")


def _stub(tmp_path, name):
    """A single-cluster kubeconfig file that points nowhere (pin reads names only)."""
    path = tmp_path / f"{name}.kubeconfig"
    path.write_text(json.dumps({
        "clusters": [{"name": "c", "cluster": {"server": f"https://{name}.invalid:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))
    return path


# ---------------------------------------------------------------------------- two real clusters


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    from devtools.localcluster import LocalCluster

    root = tmp_path_factory.mktemp("identity")
    with LocalCluster(root / "a", nodes=[("gcu-node-1", {"feature.node.kubernetes.io/pci-1e36.present": "true"})]) as a, \
            LocalCluster(root / "b", nodes=[("gcu-node-1", {"feature.node.kubernetes.io/pci-1e36.present": "true"})]) as b:
        kubeconfig = merged(root / "kubeconfig", {"a": a.kubeconfig, "b": b.kubeconfig}, current="a")
        yield {"a": a, "b": b, "kubeconfig": kubeconfig,
               "uid": {name: identify(core_api(str(kubeconfig), name))["uid"] for name in ("a", "b")}}


def test_two_clusters_have_two_identities(clusters):
    assert clusters["uid"]["a"] != clusters["uid"]["b"]
    found = identify(core_api(str(clusters["kubeconfig"]), "a"))
    assert found["server"] == clusters["a"].server


def test_the_guard_records_its_cluster_and_refuses_another_naming_both(clusters):
    provider = ClusterGuardProvider()
    on_a = {"kubeconfig": str(clusters["kubeconfig"]), "context": "a", "adopt": None, "clusterUid": None}
    created = provider.create(on_a)
    recorded = created.outs
    assert recorded["uid"] == clusters["uid"]["a"] and recorded["server"] == clusters["a"].server
    # The same cluster: nothing to change.
    assert not provider.diff(created.id, recorded, on_a).changes
    # The stack now pointed at b (another context): preview and up refuse, naming both clusters and the way out.
    on_b = {**on_a, "context": "b"}
    with pytest.raises(ClusterMismatch) as refused:
        provider.diff(created.id, recorded, on_b)
    message = str(refused.value)
    assert clusters["uid"]["a"] in message and clusters["uid"]["b"] in message
    assert clusters["a"].server in message and clusters["b"].server in message
    assert f"gcu-stack:adoptCluster {clusters['uid']['b']}" in message and "'b'" in message
    # refresh and destroy refuse too, reading the cluster through the props in state.
    for call in (lambda: provider.read(created.id, {**recorded, "context": "b"}),
                 lambda: provider.delete(created.id, {**recorded, "context": "b"})):
        with pytest.raises(ClusterMismatch):
            call()
    # An adoption names the cluster it moves to: another UID does not move it.
    with pytest.raises(ClusterMismatch):
        provider.diff(created.id, recorded, {**on_b, "adopt": "00000000-0000-0000-0000-000000000000"})
    adopt = {**on_b, "adopt": clusters["uid"]["b"]}
    assert provider.diff(created.id, recorded, adopt).changes
    moved = provider.update(created.id, recorded, adopt).outs
    assert moved["uid"] == clusters["uid"]["b"] and moved["server"] == clusters["b"].server
    # Moved: now a is the other cluster.
    with pytest.raises(ClusterMismatch):
        provider.diff(created.id, moved, {**on_a, "adopt": clusters["uid"]["b"]})


def test_the_check_before_destroy_holds_the_cluster_to_the_recorded_uid(clusters):
    provider = ClusterGuardProvider()
    check = {"kubeconfig": str(clusters["kubeconfig"]), "context": "a", "adopt": None, "clusterUid": clusters["uid"]["a"]}
    created = provider.create(check)
    provider.delete(created.id, created.outs)  # the right cluster: fine
    with pytest.raises(ClusterMismatch):
        provider.delete(created.id, {**created.outs, "context": "b"})
    # While `cluster` itself changes in a preview, its UID is unknown: a change, checked at the update.
    assert provider.diff(created.id, created.outs, {**check, "clusterUid": UNKNOWN}).changes


def test_an_unreachable_cluster_is_refused_saying_what_to_do(clusters, tmp_path):
    dead = merged(tmp_path / "dead", {"gone": _stub(tmp_path, "gone")}, current="gone")
    with pytest.raises(ClusterMismatch) as refused:
        ClusterGuardProvider().delete("cluster-x", {"kubeconfig": str(dead), "context": "gone", "uid": clusters["uid"]["a"]})
    assert "cannot confirm which cluster kube context 'gone' reaches" in str(refused.value)
    assert "pulumi stack rm --force" in str(refused.value)


def test_bundled_providers_refuse_a_cluster_other_than_their_recorded_one(clusters):
    props = {"kubeconfig": str(clusters["kubeconfig"]), "context": "b", "clusterUid": clusters["uid"]["a"]}
    with pytest.raises(ClusterMismatch):
        checked_api(props)
    checked_api({**props, "context": "a"})
    # A GcuNodes resource recorded on a: its delete through a context now reaching b removes nothing there.
    use_b = {**props, "components": ["devicePlugin"], "names": [], "selector": {}, "driverLabel": None,
             "requireDriver": False, "pageSize": 500, "nodes": ["gcu-node-1"], "managedLabels": {"gcu-node-1": {"enflame.com/gcu.present": "true"}}}
    clusters["b"].kubectl("label", "node", "gcu-node-1", "enflame.com/gcu.present=true", "--overwrite")
    with pytest.raises(ClusterMismatch):
        GcuNodesProvider().delete("gcu-nodes", use_b)
    labels = json.loads(clusters["b"].kubectl("get", "node", "gcu-node-1", "-o", "json").stdout)["metadata"]["labels"]
    assert labels.get("enflame.com/gcu.present") == "true"


def test_a_switched_current_context_does_not_move_a_pinned_target(clusters, tmp_path):
    kubeconfig = merged(tmp_path / "config", {"a": clusters["a"].kubeconfig, "b": clusters["b"].kubeconfig}, current="a")
    pinned = pin(None, None, {"KUBECONFIG": str(kubeconfig)})
    use_context(kubeconfig, "b")
    # What the state holds (path and context) still reaches a.
    assert identify(core_api(*pinned))["uid"] == clusters["uid"]["a"]


def test_recording_the_cluster_is_an_update_and_a_move_replaces_delete_first():
    from components.providers.bundled import bundled_diff, changed_inputs

    keys = ("nodes", "clusterUid")
    # A resource of an earlier release recorded no cluster: updated in place once, to record it.
    recorded = bundled_diff({"nodes": ["n1"]}, {"nodes": ["n1"], "clusterUid": "u1"},
                            changed_inputs({"nodes": ["n1"]}, {"nodes": ["n1"], "clusterUid": "u1"}, keys))
    assert recorded.changes and recorded.replaces == []
    # Moved (gcu-stack:adoptCluster): replaced, leaving the old cluster first.
    moved = bundled_diff({"clusterUid": "u1"}, {"clusterUid": "u2"}, changed_inputs({"clusterUid": "u1"}, {"clusterUid": "u2"}, keys))
    assert moved.changes and moved.replaces == ["clusterUid"] and moved.delete_before_replace
