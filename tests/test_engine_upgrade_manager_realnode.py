"""gcu-upgrade-manager deployed by the stack it manages, on a real node: gum's documented `curl` calls answered
through its NodePort (kube-proxy on the node), a preview and an upgrade run by the service in its pod (its image's
Pulumi CLI, plugins and program; in-cluster credentials; its ServiceAccount's RBAC), on the one backend and stack
config the CLI on the node uses.

A real kubelet with its own containerd (devtools/realnode.py) runs the image built from images/upgrade-manager
around `scripts/gcu-stack package-service`'s package; the rest of the seed are the stand-ins of
devtools/standin_node.py. Extended leg: the image and a `pulumi up` inside a pod take minutes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess

import pytest
from engine import real_node_stack, up_converged
from gum_realnode import (
    EXPORTER_TAG,
    PASSPHRASE,
    blueprint_file,
    keep_log,
    pod,
    put_exporter_upgrade,
    secret_manifest,
    write_policy,
)
from gum_realnode import GCU_RESOURCE as NAME
from pulumi import automation as auto
from realnode_fixtures import wait_until
from service_fixtures import Service, self_signed_certificate

from devtools import standin_node

pytestmark = [pytest.mark.extended, pytest.mark.timeout(3600)]

NODE = f"gum-{os.getpid()}"
LABELS = {"enflame.com/gcu.driver.present": "true"}
TOKEN = secrets.token_hex(24)
PART_OF = "app.kubernetes.io/part-of=gcu-stack"


@pytest.fixture(scope="module")
def gum(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-upgrade-manager")
    spec = standin_node.blueprint(upgrade_manager_node=NODE)["spec"]
    with real_node_stack(root, NODE, LABELS, spec, name=NAME, upgrade_manager=True,
                         extra_tags={standin_node.image_ref("exporter"): EXPORTER_TAG}) as (cluster, node, stack, _):
        project, data = root / "project", root / "gum"
        env = stack.workspace.env_vars
        # The stack reaches its cluster as the CLI on a node does (KUBECONFIG), not by a path in its config: in the
        # service's pod the same config then means the pod's own credentials.
        stack.remove_config("gcu-stack:kubeconfig")
        env["KUBECONFIG"] = str(cluster.kubeconfig)
        stack.set_all_config({f"gcu-stack:{key}": auto.ConfigValue(value) for key, value in {
            "upgradeManagerStacksDir": str(project), "upgradeManagerBackendUrl": env["PULUMI_BACKEND_URL"],
            "upgradeManagerDataDir": str(data)}.items()})
        cluster.kubectl("apply", "-f", "-", input=secret_manifest("gcu-upgrade-manager",
                                                                  {"token": TOKEN, "passphrase": PASSPHRASE}))
        write_policy(project, [str(project), str(root / "backend"), str(data)])
        service = Service(url=f"http://{node.node_ip}:32765", token=TOKEN, log=root / "pod.log", process=None,
                          oplog=data / "op-log", blueprints=data / "blueprints")
        yield {"cluster": cluster, "node": node, "stack": stack, "service": service, "root": root}


def generations(cluster) -> dict[str, int]:
    listed = json.loads(cluster.kubectl("get", "daemonsets,deployments", "-A", "-l", PART_OF, "-o", "json").stdout)
    return {f"{d['kind']}/{d['metadata']['name']}": d["metadata"]["generation"] for d in listed["items"]}


def test_1_the_stack_deploys_the_service_on_its_node(gum):
    up_converged(gum["stack"])
    running = pod(gum["cluster"])
    assert running["spec"]["nodeName"] == NODE and running["status"]["phase"] == "Running", running["status"]
    assert all(c["ready"] for c in running["status"]["containerStatuses"])
    assert gum["stack"].outputs()["upgradeManager"].value["nodePort"] == 32765


def test_2_gums_calls_through_the_node_port(gum):
    service = gum["service"]
    status, listed = service.curl("/gum/v1/gr")
    keep_log(gum)
    assert status == 200 and listed["result"] == "Success", (listed, service.tail())
    assert [item["metadata"]["name"] for item in listed["content"]["items"]] == [NAME]
    status, got = service.curl(f"/gum/v1/gr/{NAME}")
    assert status == 200 and got["content"]["kind"] == "GcuResource" and got["content"]["status"]["phase"] == "Running"
    # The live object, read with the pod's own credentials (the CLI recorded a kubeconfig the pod does not have).
    status, exporter = service.curl(f"/gum/v1/gr/{NAME}/resource/exporter")
    assert status == 200 and exporter["content"]["kind"] == "DaemonSet", (exporter, service.tail())
    assert service.curl("/gum/v1/gr", token=None)[0] == 401
    assert service.curl("/gum/v1/gr", token="x" * 48)[0] == 401


def test_3_a_preview_run_by_the_service_in_its_pod(gum):
    service = gum["service"]
    file = blueprint_file(gum, NODE, EXPORTER_TAG)
    status, body = service.curl(f"/gum/v1/gr/{NAME}/preview", data=json.dumps({"file": file}), method="POST")
    keep_log(gum)
    assert status == 200 and body["result"] == "Success", (body, service.tail())
    changed = {c["urn"].rpartition("::")[2] for c in body["content"]["changes"] if c["op"] not in ("same", "read")}
    assert "exporter-daemonset" in changed, body["content"]["changes"]
    assert not [c for c in body["content"]["changes"] if c["op"] in ("replace", "delete", "create-replacement")]


def test_3_the_service_does_not_replace_itself(gum):
    """It runs from this stack (`--own-stack`): changing its own part would replace its pod in the middle of its own
    operation; that is refused and nothing changes."""
    service, cluster = gum["service"], gum["cluster"]
    before = generations(cluster)
    blueprint_file(gum, NODE, EXPORTER_TAG)
    document = json.loads((service.blueprints / "gr.json").read_text())
    document["spec"]["upgradeManager"]["nodeSelector"]["gcu-stack.test/moved"] = "yes"
    (service.blueprints / "self.json").write_text(json.dumps(document))
    status, body = service.curl(f"/gum/v1/gr/{NAME}", data='{"file": "self.json"}', method="PUT")
    assert status == 409 and "changes spec.upgradeManager, this service itself" in body["error"], body
    assert generations(cluster) == before


def test_4_an_upgrade_run_by_the_service_changes_only_the_exporter(gum):
    service, cluster = gum["service"], gum["cluster"]
    before = generations(cluster)
    done = put_exporter_upgrade(gum, NODE)
    assert not done["summary"].get("delete") and not done["summary"].get("create"), done["summary"]
    after = generations(cluster)
    changed = {name for name, generation in before.items() if after.get(name) != generation}
    assert changed == {"DaemonSet/enflame-gcu-exporter"}, (before, after)
    exporter = json.loads(cluster.kubectl("get", "daemonset", "-n", "kube-system", "enflame-gcu-exporter",
                                          "-o", "json").stdout)
    assert exporter["spec"]["template"]["spec"]["containers"][0]["image"].endswith(f":{EXPORTER_TAG}")
    wait_until(lambda: pod(cluster)["status"]["phase"] == "Running", 60, "the service still running after its own up")
    # One owner: the CLI on the node sees the stack the service changed, with the service's blueprint in its config.
    config = gum["stack"].get_all_config()
    assert json.loads(config["gcu-stack:spec"].value)["exporter"]["version"] == EXPORTER_TAG
    records = [r for r in service.oplog_records() if r.get("operationId") == done["id"]]
    assert [r["event"] for r in records] == ["started", "finished"] and records[1]["result"] == "Success", records
    for file in service.blueprints.iterdir():  # the directory stays: the pod has it mounted
        file.unlink()


def test_5_the_cli_again_on_the_same_backend(gum):
    """Back to the CLI: the service's up is in the stack's history, and the CLI's up converges on it."""
    history = gum["stack"].history(page_size=5, page=1)
    assert any(u.kind == "update" and u.result == "succeeded" for u in history)
    up_converged(gum["stack"], on_output=lambda _: None)
    assert gum["stack"].outputs()["phase"].value == "Running"


def test_6_a_delete_through_the_node_port_keeps_the_service_and_a_put_reinstalls(gum):
    """gum's delete, run by the service in its pod on its own stack: every component goes and the pod stays (same
    pod, still Running) to answer the next calls, as gum outlived the GcuResource it deleted."""
    service, cluster = gum["service"], gum["cluster"]
    running = pod(cluster)
    status, body = service.curl(f"/gum/v1/gr/{NAME}", data='{"policy": "foreground"}', method="DELETE")
    keep_log(gum)
    assert status == 200 and body["result"] == "Success", (body, service.tail())
    assert set(generations(cluster)) == {"Deployment/gcu-upgrade-manager"}, generations(cluster)
    assert pod(cluster)["metadata"]["uid"] == running["metadata"]["uid"]
    status, body = service.curl(f"/gum/v1/gr/{NAME}")
    assert status == 404 and "holds only this service" in body["error"], body
    put_exporter_upgrade(gum, NODE)
    assert "DaemonSet/enflame-gcu-exporter" in generations(cluster)
    assert pod(cluster)["metadata"]["uid"] == running["metadata"]["uid"]


def local_volume(path: str, claim: str) -> str:
    """A local PersistentVolume of `path` on the service's node and the operator's claim bound to it."""
    volume = f"{claim}-{os.getpid()}"
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                  "persistentVolumeReclaimPolicy": "Retain", "local": {"path": path},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": "kube-system"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local", "volumeName": volume,
                  "resources": {"requests": {"storage": "1Gi"}}}},
    ]})


def test_7_the_stacks_directory_on_a_persistent_volume(gum):
    """`upgradeManagerStateClaim`: the operator's claim (a local PV of the CLI's project directory) in place of the
    node's directory; the service reads the stack through it, at the path the CLI uses."""
    service, cluster, stack = gum["service"], gum["cluster"], gum["stack"]
    project = str(gum["root"] / "project")
    cluster.kubectl("apply", "-f", "-", input=local_volume(project, "gcu-stack-state"))
    stack.set_config("gcu-stack:upgradeManagerStateClaim", auto.ConfigValue("gcu-stack-state"))
    up_converged(stack, on_output=lambda _: None)
    running = pod(cluster)
    volumes = {v["name"]: v for v in running["spec"]["volumes"]}
    assert volumes["stacks"]["persistentVolumeClaim"] == {"claimName": "gcu-stack-state"}, volumes
    claim = json.loads(cluster.kubectl("get", "pvc", "-n", "kube-system", "gcu-stack-state", "-o", "json").stdout)
    assert claim["status"]["phase"] == "Bound", claim["status"]
    status, got = service.curl(f"/gum/v1/gr/{NAME}")
    keep_log(gum)
    assert status == 200 and got["content"]["status"]["upgradeManager"]["stateClaim"] == "gcu-stack-state", (
        got, service.tail())
    # Back on the node's directory before the stack goes: the volume's pod leaves with its mount.
    stack.remove_config("gcu-stack:upgradeManagerStateClaim")
    up_converged(stack, on_output=lambda _: None)
    wait_until(lambda: pod(cluster)["metadata"]["uid"] != running["metadata"]["uid"], 120, "the claim's pod gone")


def test_8_https_through_the_node_port_with_the_operators_certificate(gum):
    """`upgradeManagerTlsSecret`: gum's calls over HTTPS through NodePort 32765 with the operator's certificate (its
    kubelet probes it over HTTPS too); plain HTTP gets no answer there."""
    service, cluster, stack, node = gum["service"], gum["cluster"], gum["stack"], gum["node"]
    cert, key = self_signed_certificate(gum["root"] / "tls", node.node_ip)
    cluster.kubectl("create", "secret", "tls", "-n", "kube-system", "gcu-upgrade-manager-tls", f"--cert={cert}",
                    f"--key={key}")
    stack.set_config("gcu-stack:upgradeManagerTlsSecret", auto.ConfigValue("gcu-upgrade-manager-tls"))
    up_converged(stack, on_output=lambda _: None)
    secure = dataclasses.replace(service, url=f"https://{node.node_ip}:32765")
    status, listed = secure.curl("/gum/v1/gr", "--cacert", str(cert))
    keep_log(gum)
    assert status == 200 and [i["metadata"]["name"] for i in listed["content"]["items"]] == [NAME], (
        listed, service.tail())
    assert secure.curl("/gum/v1/gr", "--cacert", str(cert), token=None)[0] == 401
    plain = subprocess.run(["curl", "-sS", "--max-time", "20", f"{service.url}/gum/v1/gr"], capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode != 0 and '"result"' not in plain.stdout, plain
