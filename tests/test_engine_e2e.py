"""End to end with the real engine: pulumi preview, up, refresh and destroy of the real program
against a real kube-apiserver (kwok-simulated nodes) and a real dockerd.

The scenarios run in order on one stack, as an operator would: each builds on the last.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from engine import GCU_NODE_LABELS, GCUS, Engine, changes, engine_stack, outputs, set_json_config, up_converged
from harness import seed_spec
from pulumi import automation as auto
from realservers import AuditLog

from components.providers.cluster import core_api

MANAGED = "enflame.com/gcu.deploy.exporter"
GCU_NODES = ["gcu-node-1", "gcu-node-2"]
# The GCU nodes advertise enflame.com/gcu as their device plugin would (GCUS): post-deploy validation needs it.
NODES = [
    ("gcu-node-1", {**GCU_NODE_LABELS, "team": "gcu"}, GCUS),
    ("gcu-node-2", {**GCU_NODE_LABELS, "team": "gcu"}, GCUS),
    ("cpu-node-1", {"team": "cpu"}),
]
# A node's docker config as an operator left it: odd formatting, unrelated keys.
ORIGINAL = b'{\n  "log-level": "warn",\n    "labels": ["site=lab"]\n}\n'
ADMIN = "admin"


class E2E(Engine):
    @property
    def api(self):
        return core_api(self.cluster.kubeconfig, None)

    def preview(self, **kwargs) -> tuple[auto.PreviewResult, list]:
        events: list = []
        result = self.stack.preview(
            policy_packs=[str(self.root / "project" / "policies")],
            policy_pack_configs=[str(self.policy_config)],
            on_event=events.append,
            **kwargs,
        )
        return result, events

    def kubectl(self, *args: str) -> str:
        return self.cluster.kubectl(*args).stdout


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    with engine_stack(tmp_path_factory.mktemp("e2e"), NODES, "e2e", audit=True) as engine:
        Path(engine.dockerd.config_file).write_text('{"default-runtime": "runc", "runtimes": {}}')
        engine.dockerd.reload()
        Path(engine.dockerd.config_file).write_bytes(ORIGINAL)
        yield E2E(**vars(engine))


KINDS = {
    "DaemonSet": "daemonsets.apps",
    "ConfigMap": "configmaps",
    "ServiceAccount": "serviceaccounts",
    "Service": "services",
    "ClusterRole": "clusterroles.rbac.authorization.k8s.io",
    "ClusterRoleBinding": "clusterrolebindings.rbac.authorization.k8s.io",
    "CustomResourceDefinition": "customresourcedefinitions.apiextensions.k8s.io",
}


def ours(e2e: E2E, kind: str) -> list[dict]:
    """gcu-stack's objects of one kind, cluster-wide."""
    listed = e2e.kubectl("get", KINDS[kind], "--all-namespaces", "-l", "app.kubernetes.io/part-of=gcu-stack", "-o", "json")
    return [dict(item, kind=kind) for item in json.loads(listed)["items"]]


def node(api, name: str) -> dict:
    return json.loads(api.read_node(name, _preload_content=False).data)["metadata"]


def default_runtime(dockerd) -> str:
    return dockerd.info()["DefaultRuntime"]


def steps(events: list) -> dict[str, str]:
    """URN -> operation from preview/update engine events."""
    found = {}
    for event in events:
        pre = event.resource_pre_event
        if pre is not None and pre.metadata is not None:
            found[pre.metadata.urn] = str(pre.metadata.op.value if hasattr(pre.metadata.op, "value") else pre.metadata.op)
    return found


def test_1_preview_of_the_seed_blueprint_passes_the_policy_pack(e2e):
    result, events = e2e.preview()
    assert result.change_summary.get("create", 0) >= 20
    # Policy packs report through the engine; no mandatory violation means the preview succeeded.
    assert "mandatory" not in result.stdout
    assert any(":DaemonSet::" in urn for urn in steps(events))


def test_2_up_brings_every_component_to_ready(e2e):
    up_converged(e2e.stack)
    out = outputs(e2e.stack)
    assert out["phase"] == "Running"
    assert out["readyResource"] == "5/5"
    assert out["clusterGCUNodes"] == GCU_NODES  # not cpu-node-1
    assert {s["name"]: s["status"] for s in out["resourceStatuses"]} == dict.fromkeys(
        ["nfd", "toolkit", "devicePlugin", "exporter", "gfd"], "Running"
    )
    for daemonset in ours(e2e, "DaemonSet"):
        status = daemonset["status"]
        assert status["numberReady"] == status["desiredNumberScheduled"] > 0, daemonset["metadata"]["name"]
    gcu = [d for d in ours(e2e, "DaemonSet") if d["metadata"]["name"] == "enflame-gcu-exporter"][0]
    assert gcu["status"]["desiredNumberScheduled"] == len(GCU_NODES)
    assert default_runtime(e2e.dockerd) == "enflame"
    for name in GCU_NODES:
        assert node(e2e.api, name)["labels"]["enflame.com/gcu.present"] == "true"
    # What scripts/gcu-stack's private TMPDIR is for: the real Kubernetes provider left its copies of the kubeconfig
    # (the credentials) in the TMPDIR it was given (engine.pulumi_env), one a start.
    copies = list(Path(e2e.stack.workspace.env_vars["TMPDIR"]).glob("kubeconfig*"))
    assert copies and all("client-certificate-data" in c.read_text() or "token" in c.read_text() for c in copies)


def last_update(stack: auto.Stack) -> str:
    (condition,) = outputs(stack)["conditions"]
    return condition["lastUpdateTime"]


def test_3_second_up_changes_nothing(e2e):
    before = last_update(e2e.stack)
    assert before  # the time of the deploy, from the objects' server-side apply records
    time.sleep(1.1)  # managedFields times have a resolution of one second
    result = up_converged(e2e.stack)
    changed = changes(result.summary.resource_changes)
    assert changed == {}, changed
    assert last_update(e2e.stack) == before  # nothing changed, so neither did the time


def test_4_changing_only_the_exporter_version_updates_only_the_exporter(e2e):
    deployed_at = last_update(e2e.stack)
    before = {(o["kind"], o["metadata"]["name"]): o["metadata"] for kind in ("DaemonSet", "ConfigMap", "ServiceAccount", "ClusterRole", "Service") for o in ours(e2e, kind)}
    spec = seed_spec()
    spec["exporter"]["version"] = "2.1.0"
    e2e.stack.remove_config("gcu-stack:blueprint")
    set_json_config(e2e.stack, "spec", spec)
    preview, events = e2e.preview()
    # The dynamic-provider host is configured with the stack's config, so a config edit shows
    # as an update of that provider itself; no resource other than the exporter's changes.
    changed = {urn for urn, op in steps(events).items() if op not in ("same", "read") and "::pulumi:providers:" not in urn}
    assert changed == {u for u in changed if "exporter" in u}, changed
    assert any(urn.endswith("DaemonSet::exporter-daemonset") for urn in changed)
    up_converged(e2e.stack)
    after = {(o["kind"], o["metadata"]["name"]): o["metadata"] for kind in ("DaemonSet", "ConfigMap", "ServiceAccount", "ClusterRole", "Service") for o in ours(e2e, kind)}
    assert set(after) == set(before)
    for key, meta in before.items():
        if key == ("DaemonSet", "enflame-gcu-exporter"):
            assert after[key]["generation"] == meta["generation"] + 1
        elif key[0] == "DaemonSet":
            assert after[key]["generation"] == meta["generation"], key
        else:
            assert after[key]["resourceVersion"] == meta["resourceVersion"], key
    exporter = [d for d in ours(e2e, "DaemonSet") if d["metadata"]["name"] == "enflame-gcu-exporter"][0]
    assert exporter["spec"]["template"]["spec"]["containers"][0]["image"].endswith("/gcu-exporter:2.1.0")
    assert outputs(e2e.stack)["readyResource"] == "5/5"
    assert last_update(e2e.stack) > deployed_at  # the upgrade is the last change the stack made


def test_5_refresh_shows_a_removed_managed_label_and_up_repairs_it(e2e):
    e2e.kubectl("label", "node", "gcu-node-1", f"{MANAGED}-")
    assert MANAGED not in node(e2e.api, "gcu-node-1")["labels"]
    refreshed = e2e.stack.refresh(on_output=lambda _: None)
    assert refreshed.summary.resource_changes.get("update", 0) >= 1
    state = e2e.stack.export_stack().deployment["resources"]
    (gcu_nodes,) = [r for r in state if r["type"] == "pulumi-python:dynamic/gcu:GcuNodes"]
    assert f"gcu-node-1: managed label {MANAGED} was removed" in gcu_nodes["outputs"]["drift"]
    repaired = up_converged(e2e.stack)
    assert repaired.summary.resource_changes.get("update", 0) >= 1
    assert node(e2e.api, "gcu-node-1")["labels"][MANAGED] == "true"


def test_6_bad_blueprint_fails_preview_naming_the_field_and_changes_nothing(e2e):
    good = e2e.stack.get_config("gcu-stack:spec")
    spec = json.loads(good.value)
    spec["exporter"]["imagePulPolicy"] = spec["exporter"].pop("imagePullPolicy")
    set_json_config(e2e.stack, "spec", spec)
    audit = AuditLog(e2e.cluster)
    audit.mark()
    try:
        with pytest.raises(auto.CommandError) as caught:
            e2e.preview()
        assert "spec.exporter.imagePulPolicy: unknown field (did you mean imagePullPolicy?)" in str(caught.value)
        with pytest.raises(auto.CommandError):
            e2e.stack.up(on_output=lambda _: None)
        time.sleep(1)
        assert audit.writes(user=ADMIN) == 0
        for resource in ("daemonsets", "configmaps", "services", "serviceaccounts"):
            assert audit.writes(resource, user=ADMIN) == 0
    finally:
        e2e.stack.set_config("gcu-stack:spec", good)
    assert outputs(e2e.stack)["readyResource"] == "5/5"


def test_7_destroy_removes_everything_and_restores_the_nodes(e2e):
    e2e.stack.destroy(on_output=lambda _: None)
    for kind in ("DaemonSet", "ConfigMap", "ServiceAccount", "Service", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"):
        assert ours(e2e, kind) == [], kind
    for name, labels, *_ in NODES:
        meta = node(e2e.api, name)
        assert not [k for k in meta["labels"] if k.startswith("enflame.com/gcu.deploy.") or k == "enflame.com/gcu.present"], name
        assert "gcu-stack.enflame.com/managed-labels" not in (meta.get("annotations") or {})
        for key, value in labels.items():
            assert meta["labels"][key] == value  # labels gcu-stack did not add are intact
    assert Path(e2e.dockerd.config_file).read_bytes() == ORIGINAL
    assert default_runtime(e2e.dockerd) == "runc"
