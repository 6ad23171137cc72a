"""gcu-upgrade-manager's documented calls, with real curl, against the gcu-stack service driving a real stack on a
real control plane (kwok-simulated nodes) and a real dockerd: list, get, get driver, preview, an upgrade that
changes the exporter only (its progress and history), a second change refused while one runs, deletes in the
background and in the foreground, and a reinstall by PUT. The scenarios run in order on one stack, as an operator's
scripts would."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from driver_fixtures import all_ready, apply, gcu_job
from engine import GCU_NODE_LABELS, GCUS, engine_stack, set_json_config, up_converged
from harness import seed_spec
from realnode_fixtures import wait_until
from service_fixtures import running_service

NAME = "enflame-gcu-resource"  # the seed's GcuResource, as gum's examples call it
NODES = [("gcu-node-1", GCU_NODE_LABELS, GCUS), ("gcu-node-2", GCU_NODE_LABELS, GCUS), ("cpu-node-1", {})]
PART_OF = "app.kubernetes.io/part-of=gcu-stack"


@pytest.fixture(scope="module")
def gum(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e-service")
    with engine_stack(root, NODES, NAME) as engine:
        engine.stack.remove_config("gcu-stack:blueprint")
        set_json_config(engine.stack, "spec", spec("1.0", "1.0.0"))
        set_json_config(engine.stack, "driverUpgrade", {"driverReadyTimeoutSeconds": 20})
        packs = {"policy_packs": [str(root / "project" / "policies")], "policy_pack_configs": [str(engine.policy_config)]}
        up_converged(engine.stack, **packs)  # installed as `scripts/gcu-stack up` would
        (root / "svc" / "state").mkdir(parents=True)
        shutil.copy(engine.policy_config, root / "svc" / "state" / f"policy-{NAME}.json")  # as scripts/gcu-stack keeps it
        env = {**os.environ, **engine.stack.workspace.env_vars}
        with running_service(root / "svc", root / "project", env) as service:
            yield engine, service


def spec(driver: str, exporter: str) -> dict:
    """The seed's blueprint with the driver deployed (gum's examples read it), at these versions."""
    return seed_spec(**{"driver.notDeploy": False, "driver.version": driver, "exporter.version": exporter})


def blueprint(service, file: str, driver: str, exporter: str) -> None:
    document = {"apiVersion": "topsops.enflame.com/v1", "kind": "GcuResource", "metadata": {"name": NAME},
                "spec": spec(driver, exporter)}
    (service.blueprints / file).write_text(json.dumps(document, indent=2))


def daemonsets(engine) -> dict[str, dict]:
    listed = json.loads(engine.cluster.kubectl("get", "daemonsets", "-A", "-l", PART_OF, "-o", "json").stdout)["items"]
    return {d["metadata"]["name"]: d for d in listed}


def succeeded(status_body, operation: str) -> dict:
    status, body = status_body
    assert status == 200 and body["operation"] == operation and body["result"] == "Success", status_body
    return body


def test_1_list_get_and_get_driver_answer_as_gum_did(gum):
    engine, service = gum
    listed = succeeded(service.curl("/gum/v1/gr"), "List")["content"]
    assert [item["metadata"]["name"] for item in listed["items"]] == [NAME]
    resource = succeeded(service.curl(f"/gum/v1/gr/{NAME}"), "Get")["content"]
    assert (resource["apiVersion"], resource["kind"]) == ("topsops.enflame.com/v1", "GcuResource")
    assert resource["spec"]["driver"]["name"] == "enflame-gcu-driver"
    assert resource["status"]["phase"] == "Running" and resource["status"]["readyResource"] == "6/6"
    assert sorted(resource["status"]["clusterGCUNodes"]) == ["gcu-node-1", "gcu-node-2"]
    driver = succeeded(service.curl(f"/gum/v1/gr/{NAME}/resource/driver"), "Get")["content"]
    live = daemonsets(engine)["enflame-gcu-driver"]
    assert driver["kind"] == "DaemonSet" and driver["metadata"]["uid"] == live["metadata"]["uid"]
    assert driver["status"]["desiredNumberScheduled"] == 2
    plugin = succeeded(service.curl(f"/gum/v1/gr/{NAME}/resource/plugin"), "Get")["content"]  # gum's name for it
    assert plugin["metadata"]["name"] == "enflame-gcu-k8s-plugin"


def test_2_preview_shows_only_the_exporter_and_changes_nothing(gum):
    engine, service = gum
    before = {k: v.value for k, v in engine.stack.get_all_config().items()}
    blueprint(service, "gr.json", "1.0", "2.1.0")
    preview = succeeded(service.curl(f"/gum/v1/gr/{NAME}/preview", method="POST", data='{"file": "gr.json"}'), "Preview")
    changed = [c for c in preview["content"]["changes"] if c["type"] != "pulumi:providers:pulumi-python"]
    assert changed and all("exporter" in c["urn"] for c in changed), changed
    assert any(c["urn"].endswith("DaemonSet::exporter-daemonset") and c["op"] == "update" for c in changed)
    assert [v for v in preview["content"]["policyViolations"] if v["level"] == "mandatory"] == []
    assert {k: v.value for k, v in engine.stack.get_all_config().items()} == before


def test_3_put_upgrades_only_the_exporter_with_progress_and_history(gum):
    engine, service = gum
    before = {name: d["metadata"]["generation"] for name, d in daemonsets(engine).items()}
    started = succeeded(service.curl(f"/gum/v1/gr/{NAME}", method="PUT", data='{"file": "gr.json"}'), "Upgrade")
    operation = started["operationId"]
    # A second change while it runs is refused at once, naming it.
    status, body = service.curl(f"/gum/v1/gr/{NAME}", method="DELETE", data='{"policy": "foreground"}')
    assert status == 409 and body["result"] == "Failed" and operation in body["error"], body
    status, progress = service.curl(f"/gum/v1/operations/{operation}")
    assert status == 200 and progress["content"]["operation"] == "Upgrade" and progress["content"]["stack"] == NAME
    done = service.wait_for(operation)
    assert done["phase"] == "succeeded", done
    assert done["summary"].get("update", 0) >= 1 and not done["summary"].get("delete") and not done["summary"].get("create")
    assert done["outputs"]["readyResource"] == "6/6"
    after = daemonsets(engine)
    assert after["enflame-gcu-exporter"]["metadata"]["generation"] == before["enflame-gcu-exporter"] + 1
    assert {n: g for n, g in before.items() if n != "enflame-gcu-exporter"} == {
        n: d["metadata"]["generation"] for n, d in after.items() if n != "enflame-gcu-exporter"}
    image = after["enflame-gcu-exporter"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith("/gcu-exporter:2.1.0"), image
    history = succeeded(service.curl(f"/gum/v1/gr/{NAME}/history"), "History")["content"]["updates"]
    assert history[0]["kind"] == "update" and history[0]["result"] == "succeeded"
    assert "PUT gr.json by 127.0.0.1" in history[0]["message"] and operation in history[0]["message"]
    records = [r for r in service.oplog_records() if r.get("operationId") == operation]
    assert [r["event"] for r in records] == ["started", "finished"] and records[1]["result"] == "Success"
    assert records[0]["request"] == {"file": "gr.json"} and "curl" in records[0]["who"]
    status, metrics = service.curl("/metrics")
    assert 'gcu_stack_service_operations_total{operation="Upgrade",result="Success"} 1.0' in metrics
    assert "gcu_stack_service_driver_node_upgrade_seconds_count" not in metrics  # no rollout in this one


def test_4_a_driver_upgrade_is_previewed_by_node_and_its_progress_is_visible_per_node(gum):
    engine, service = gum
    blueprint(service, "driver-2.0.json", "2.0", "2.1.0")
    preview = succeeded(service.curl(f"/gum/v1/gr/{NAME}/preview", method="POST", data='{"file": "driver-2.0.json"}'),
                        "Preview")["content"]
    plan = "\n".join(m["message"] for m in preview["messages"])
    assert "gcu-driver:2.0, 2 of 2 GCU node(s), in 2 wave(s)" in plan and "wave 1: gcu-node-1" in plan, plan
    # A GCU job whose PodDisruptionBudget holds its eviction: its node stays `evicting` until the budget goes, so
    # the progress is seen there however fast simulated nodes upgrade otherwise.
    job, budget = gcu_job("training", 1)
    budget["spec"]["minAvailable"] = 1
    apply(engine.cluster, [job, budget])
    wait_until(lambda: all_ready(engine.cluster, "app=training", 1), 60, what="the training job")
    (pod,) = json.loads(engine.cluster.kubectl("get", "pods", "-l", "app=training", "-o", "json").stdout)["items"]
    job_node = pod["spec"]["nodeName"]
    started = succeeded(service.curl(f"/gum/v1/gr/{NAME}", method="PUT", data='{"file": "driver-2.0.json"}'), "Upgrade")
    seen: dict[str, set] = {}
    held = None
    while True:
        status, body = service.curl(f"/gum/v1/operations/{started['operationId']}")
        progress = body["content"]
        for node, state in (progress.get("driverNodes") or {}).items():
            seen.setdefault(node, set()).add(state)
            if node == job_node and state == "evicting" and held is None:
                held = node
                engine.cluster.kubectl("delete", "pdb", "training")  # seen: let the eviction through
        if progress["phase"] != "running":
            break
        time.sleep(0.5)
    assert progress["phase"] == "succeeded", progress
    assert held is not None, seen  # the held node's state was visible while the operation ran
    # The node without the job first: the evicted job has an upgraded node to go to.
    assert progress["outputs"]["driverUpgrade"]["upgraded"] == sorted({"gcu-node-1", "gcu-node-2"} - {job_node}) + [job_node]
    image = daemonsets(engine)["enflame-gcu-driver"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith("gcu-driver:2.0"), image
    # Each node's record of this rollout: its states in order, how long, and the job evicted from the held node.
    reports = progress["outputs"]["driverUpgrade"]["reports"]
    for node in ("gcu-node-1", "gcu-node-2"):
        states = [s["state"] for s in reports[node]["states"]]
        assert reports[node]["result"] == "upgraded" and states[0] == "upgrade-required" and states[-1] == "done", reports[node]
        assert "restarting-driver" in states and reports[node]["seconds"] > 0
    assert reports[job_node]["evicted"] == [f"default/{pod['metadata']['name']}"], reports[job_node]
    status, metrics = service.curl("/metrics")
    assert 'gcu_stack_service_driver_node_upgrade_seconds_count{result="upgraded"} 2.0' in metrics, metrics


def test_5_delete_in_the_background_answers_at_once_then_removes_everything(gum):
    engine, service = gum
    started = succeeded(service.curl(f"/gum/v1/gr/{NAME}", method="DELETE"), "Delete")
    done = service.wait_for(started["operationId"])
    assert done["phase"] == "succeeded" and done["summary"].get("delete", 0) >= 20, done
    assert daemonsets(engine) == {}
    status, body = service.curl(f"/gum/v1/gr/{NAME}")
    assert status == 404 and body["result"] == "Failed" and f'"{NAME}" not found' in body["error"]
    assert succeeded(service.curl("/gum/v1/gr"), "List")["content"]["items"] == []


def test_6_put_reinstalls_and_a_foreground_delete_answers_when_everything_is_gone(gum):
    engine, service = gum
    started = succeeded(service.curl(f"/gum/v1/gr/{NAME}", method="PUT", data='{"file": "gr.json"}'), "Upgrade")
    done = service.wait_for(started["operationId"])
    assert done["phase"] == "succeeded" and done["outputs"]["readyResource"] == "6/6", done
    assert len(daemonsets(engine)) == 6
    succeeded(service.curl(f"/gum/v1/gr/{NAME}", method="DELETE", data='{"policy": "foreground"}'), "Delete")
    assert daemonsets(engine) == {}  # gone when it answered
    status, body = service.curl(f"/gum/v1/gr/{NAME}")
    assert status == 404 and body["result"] == "Failed"


def test_7_in_the_cluster_a_delete_keeps_the_service_and_a_put_reinstalls_around_it(gum):
    """The service deployed by its own stack (`--own-stack`, as its pod runs) deletes the GcuResource as gum did: every
    component goes, the service's Deployment stays untouched to take the next PUT, which reinstalls around it."""
    engine, service = gum
    document = {"apiVersion": "topsops.enflame.com/v1", "kind": "GcuResource", "metadata": {"name": NAME},
                "spec": {**spec("1.0", "2.1.0"), "upgradeManager": {"nodeSelector": {"kubernetes.io/hostname": "cpu-node-1"}}}}
    (service.blueprints / "with-service.json").write_text(json.dumps(document))
    started = succeeded(service.curl(f"/gum/v1/gr/{NAME}", method="PUT", data='{"file": "with-service.json"}'), "Upgrade")
    assert service.wait_for(started["operationId"])["phase"] == "succeeded"
    deployment = ("get", "deployment", "-n", "kube-system", "-l", "app.kubernetes.io/component=upgradeManager", "-o", "json")
    [before] = json.loads(engine.cluster.kubectl(*deployment).stdout)["items"]
    env = {**os.environ, **engine.stack.workspace.env_vars}
    state = engine.root / "own" / "state"
    state.mkdir(parents=True)
    shutil.copy(engine.policy_config, state / f"policy-{NAME}.json")
    with running_service(engine.root / "own", engine.root / "project", env, "--own-stack", NAME) as own:
        shutil.copy(service.blueprints / "with-service.json", own.blueprints / "gr.json")
        succeeded(own.curl(f"/gum/v1/gr/{NAME}", method="DELETE", data='{"policy": "foreground"}'), "Delete")
        assert daemonsets(engine) == {}  # every component gone when it answered
        [kept] = json.loads(engine.cluster.kubectl(*deployment).stdout)["items"]
        assert (kept["metadata"]["uid"], kept["metadata"]["generation"]) == (
            before["metadata"]["uid"], before["metadata"]["generation"])
        # As gum answered after its delete: the GcuResource is gone, though its stack still runs the service.
        status, body = own.curl(f"/gum/v1/gr/{NAME}")
        assert status == 404 and "holds only this service" in body["error"], body
        assert succeeded(own.curl("/gum/v1/gr"), "List")["content"]["items"] == []
        started = succeeded(own.curl(f"/gum/v1/gr/{NAME}", method="PUT", data='{"file": "gr.json"}'), "Upgrade")
        done = own.wait_for(started["operationId"])
        assert done["phase"] == "succeeded" and len(daemonsets(engine)) == 6, (done, own.tail())
        [again] = json.loads(engine.cluster.kubectl(*deployment).stdout)["items"]
        assert again["metadata"]["generation"] == before["metadata"]["generation"]
        assert succeeded(own.curl(f"/gum/v1/gr/{NAME}"), "Get")["content"]["metadata"]["name"] == NAME
