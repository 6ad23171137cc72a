"""A stack acts only on its own cluster, through the real engine (issue 20).

Two real control planes, a and b, as contexts of one kubeconfig file that the stack does not name
(it follows KUBECONFIG and the current context, as a newcomer's stack does). The stack is deployed
to a; then the current context is switched to b, and KUBECONFIG to b's own file: preview, up,
refresh and a plain `pulumi destroy` (which never runs the program) are refused, naming both
clusters, and neither cluster changes. Back on a, nothing is left to do. Finally the stack is moved
to b deliberately with gcu-stack:adoptCluster. A cluster older than gcu-stack supports (a third control plane
emulating the minor version before the oldest supported) is refused by preview and up before anything is created.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from engine import (
    GCU_NODE_LABELS,
    GCUS,
    changes,
    destroy,
    engine_stack,
    local_servers,
    outputs,
    prepare_stack,
    up_converged,
)
from kubeconfigs import merged, use_context
from pulumi import automation as auto
from realservers import PROJECT_DIR

from components.kube_support import OLDEST_SUPPORTED, supported_range

NODES = [("gcu-node-1", GCU_NODE_LABELS, GCUS), ("cpu-node-1", {})]
OURS = "enflame.com/gcu.present"


def uid(cluster) -> str:
    return json.loads(cluster.kubectl("get", "namespace", "kube-system", "-o", "json").stdout)["metadata"]["uid"]


def footprint(cluster) -> dict:
    """What gcu-stack has on a cluster: its DaemonSets and the GCU node's labels of ours."""
    daemonsets = json.loads(cluster.kubectl("get", "daemonsets", "-A", "-o", "json").stdout)["items"]
    labels = json.loads(cluster.kubectl("get", "node", "gcu-node-1", "-o", "json").stdout)["metadata"].get("labels") or {}
    return {
        "daemonsets": sorted(d["metadata"]["name"] for d in daemonsets),
        "labels": sorted(k for k in labels if k == OURS or k.startswith("enflame.com/gcu.deploy.")),
    }


def state_urns(stack: auto.Stack) -> list[str]:
    return sorted(r["urn"] for r in stack.export_stack().deployment.get("resources") or [])


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    from devtools.localcluster import LocalCluster

    root = tmp_path_factory.mktemp("identity")
    with local_servers(root, NODES) as (a, dockerd), LocalCluster(root / "b", nodes=NODES) as b:
        kubeconfig = merged(root / "kubeconfig", {"a": a.kubeconfig, "b": b.kubeconfig}, current="a")
        stack, policy_config = prepare_stack(root, a, dockerd, name="identity")
        stack.remove_config("gcu-stack:kubeconfig")
        stack.workspace.env_vars["KUBECONFIG"] = str(kubeconfig)
        up_converged(stack)
        yield {"stack": stack, "a": a, "b": b, "kubeconfig": kubeconfig, "root": root}
        stack.workspace.env_vars["KUBECONFIG"] = str(kubeconfig)
        destroy(stack)


def refused(call, *clusters) -> str:
    with pytest.raises(auto.CommandError) as error:
        call()
    text = str(error.value)
    assert "refused: this stack's resources live on the cluster" in text, text[-3000:]
    for cluster in clusters:
        assert uid(cluster) in text and cluster.server in text, text[-3000:]
    return text


def test_the_stack_records_the_cluster_it_deployed_to(two):
    stack, a = two["stack"], two["a"]
    assert outputs(stack)["readyResource"] == "5/5"
    assert outputs(stack)["cluster"] == {"server": a.server, "uid": uid(a), "context": "a"}
    assert footprint(a)["labels"] and footprint(a)["daemonsets"]
    assert footprint(two["b"]) == {"daemonsets": [], "labels": []}


def test_another_current_context_is_refused_by_every_command(two):
    stack, a, b = two["stack"], two["a"], two["b"]
    before_a, before_state = footprint(a), state_urns(stack)
    use_context(two["kubeconfig"], "b")
    try:
        refused(lambda: stack.preview(on_output=lambda _: None), a, b)
        refused(lambda: stack.up(on_output=lambda _: None), a, b)
        # refresh (and destroy) never run the program: they use the context pinned in the state, a, whatever
        # the current context says now, so this refresh reads a and finds it as it was.
        stack.refresh(on_output=lambda _: None)
    finally:
        use_context(two["kubeconfig"], "a")
    assert footprint(a) == before_a and footprint(b) == {"daemonsets": [], "labels": []}
    assert state_urns(stack) == before_state


def test_a_kubeconfig_whose_context_now_reaches_another_cluster_is_refused_by_destroy_and_refresh(two):
    stack, a, b = two["stack"], two["a"], two["b"]
    before_a, before_state = footprint(a), state_urns(stack)
    # The pinned context "a" of the same file now names b's server (a kubeconfig regenerated for another cluster).
    moved = json.loads(two["kubeconfig"].read_text())
    original = two["kubeconfig"].read_text()
    b_cluster = next(c for c in moved["clusters"] if c["name"] == "b")["cluster"]
    b_user = next(u for u in moved["users"] if u["name"] == "b")["user"]
    for entry in moved["clusters"]:
        if entry["name"] == "a":
            entry["cluster"] = b_cluster
    for entry in moved["users"]:
        if entry["name"] == "a":
            entry["user"] = b_user
    two["kubeconfig"].write_text(json.dumps(moved))
    try:
        # scripts/gcu-stack checks before it runs refresh or destroy; a plain `pulumi destroy` is refused by the
        # check that runs before every delete.
        checked = stackops(two, "cluster-check", "--stack", "identity")
        assert checked.returncode == 1 and "refused: this stack's resources live on the cluster" in checked.stderr
        assert uid(a) in checked.stderr and uid(b) in checked.stderr
        refused(lambda: stack.destroy(on_output=lambda _: None), a, b)
    finally:
        two["kubeconfig"].write_text(original)
    assert footprint(a) == before_a and footprint(b) == {"daemonsets": [], "labels": []}
    assert state_urns(stack) == before_state


def test_back_on_its_cluster_there_is_nothing_to_do(two):
    stack = two["stack"]
    result = stack.preview(on_output=lambda _: None)
    assert changes(result.change_summary) == {}


def test_the_same_cluster_through_another_address_updates_the_provider_and_replaces_nothing(two):
    # Another kubeconfig reaching a through `localhost` (its serving certificate names it, as a cluster's names its
    # in-cluster address): what an operator's new kubeconfig, or the in-cluster service, gives the program.
    stack, a = two["stack"], two["a"]
    other = json.loads(two["kubeconfig"].read_text())
    for entry in other["clusters"]:
        if entry["name"] == "a":
            entry["cluster"]["server"] = entry["cluster"]["server"].replace("127.0.0.1", "localhost")
    moved = two["root"] / "kubeconfig-localhost"
    moved.write_text(json.dumps(other))
    before = uids_of_daemonsets(a)
    stack.workspace.env_vars["KUBECONFIG"] = str(moved)
    try:
        lines: list[str] = []
        result = stack.preview(diff=True, on_output=lines.append)
        ops = changes(result.change_summary)
        assert not {"replace", "create-replacement", "delete-replaced", "create", "delete"} & set(ops), "".join(lines)[-6000:]
        up_converged(stack)
        assert outputs(stack)["cluster"]["uid"] == uid(a) and "localhost" in outputs(stack)["cluster"]["server"]
        assert uids_of_daemonsets(a) == before   # the same objects, not recreated
    finally:
        stack.workspace.env_vars["KUBECONFIG"] = str(two["kubeconfig"])


def uids_of_daemonsets(cluster) -> dict:
    items = json.loads(cluster.kubectl("get", "daemonsets", "-A", "-o", "json").stdout)["items"]
    return {d["metadata"]["name"]: d["metadata"]["uid"] for d in items}


def test_adopt_cluster_moves_the_stack_deliberately(two):
    stack, a, b = two["stack"], two["a"], two["b"]
    use_context(two["kubeconfig"], "b")
    stack.set_config("gcu-stack:adoptCluster", auto.ConfigValue(uid(b)))
    up_converged(stack)
    assert outputs(stack)["cluster"]["uid"] == uid(b)
    assert outputs(stack)["readyResource"] == "5/5"
    assert footprint(b)["daemonsets"] and footprint(b)["labels"]
    # What was on a went with the move: nothing of gcu-stack stays there unmanaged.
    assert footprint(a) == {"daemonsets": [], "labels": []}
    stack.remove_config("gcu-stack:adoptCluster")
    assert stackops(two, "cluster-check", "--stack", "identity").returncode == 0


def test_an_embedded_stack_starts_over_when_its_cluster_was_rebuilt(two):
    # What scripts/gcu-stack does for the embedded stacks after local-down: the stack is now on b; "rebuilt" here
    # is a, another cluster behind the kubeconfig the embedded stack is given.
    same = stackops(two, "embedded-reset", "--stack", "identity", "--kubeconfig", two["b"].kubeconfig)
    assert same.returncode == 0 and same.stderr == ""
    assert "identity" in [s.name for s in two["stack"].workspace.list_stacks()]
    rebuilt = stackops(two, "embedded-reset", "--stack", "identity", "--kubeconfig", two["a"].kubeconfig)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"the embedded cluster was rebuilt since its last up (kube-system UID {uid(two['b'])} is now {uid(two['a'])})" in rebuilt.stderr
    assert "identity" not in [s.name for s in two["stack"].workspace.list_stacks()]
    assert (two["root"] / "project" / "Pulumi.identity.yaml").exists()  # its settings stay


def stackops(two, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **two["stack"].workspace.env_vars, "PYTHONPATH": str(PROJECT_DIR)}
    return subprocess.run([sys.executable, "-m", "stackops", *args, "--project-dir", str(two["root"] / "project")],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.older_than_supported
def test_a_cluster_older_than_supported_is_refused_by_preview_and_up_before_anything_is_created(tmp_path_factory):
    older = f"{OLDEST_SUPPORTED[0]}.{OLDEST_SUPPORTED[1] - 1}"
    root = tmp_path_factory.mktemp("older")
    with engine_stack(root, NODES, "older", extra_apiserver_args=[f"--emulated-version={older}"]) as engine:
        before = objects(engine.cluster)
        for command in (engine.stack.preview, engine.stack.up):
            with pytest.raises(auto.CommandError) as error:
                command(on_output=lambda _: None)
            text = str(error.value)
            assert f"refused: the cluster {engine.cluster.server}, reached through kube context" in text, text[-3000:]
            assert f"runs Kubernetes {older} (kube-apiserver v" in text and f"emulating {older})" in text, text[-3000:]
            assert supported_range() in text and "Nothing was done" in text, text[-3000:]
        assert footprint(engine.cluster) == {"daemonsets": [], "labels": []}
        assert objects(engine.cluster) == before


def objects(cluster) -> set[str]:
    """The kinds of object the stack creates, every one on the cluster by namespace and name."""
    kinds = "namespaces,daemonsets,deployments,services,configmaps,secrets,serviceaccounts,clusterroles,clusterrolebindings"
    lines = cluster.kubectl("get", kinds, "-A", "-o", "custom-columns=K:.kind,NS:.metadata.namespace,N:.metadata.name",
                            "--no-headers").stdout.splitlines()
    return set(lines)
