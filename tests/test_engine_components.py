"""Nightingale and the GCU-share pair come up on the real control plane with the real engine."""

from __future__ import annotations

import json

import pytest
from engine import GCU_NODE_LABELS, engine_stack, outputs, set_json_config, up_converged
from pulumi import automation as auto
from realservers import PROJECT_DIR

# The GCU nodes advertise the GCU-share resource as its plugin would: post-deploy validation needs it.
SHARES = {"capacity": {"enflame.com/gcu-memory": "64"}}
NODES = [
    ("gcu-node-1", GCU_NODE_LABELS, SHARES),
    ("gcu-node-2", GCU_NODE_LABELS, SHARES),
    ("cpu-node-1", {}),
]
PASSWORD = "n9e-Db-e2e-pw"


def spec() -> dict:
    spec = json.loads((PROJECT_DIR / "blueprints" / "gcu-resource.json").read_text())["spec"]
    spec["devicePlugin"]["notDeploy"] = True
    spec["gcusharePlugin"].update({"notDeploy": False, "memoryUnit": "0.1", "gcushareNodes": ["gcu-node-2"]})
    spec["gcushareScheduler"]["notDeploy"] = False
    spec["nightingale"] = {"notDeploy": False, "namespace": "enflame", "mysql-pv": {"name": "mysql-pv", "hostpath": "/var/lib/gcu-e2e/mysql"}}
    return spec


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e-components")
    with engine_stack(root, NODES, "components", check_destroy=True) as engine:
        engine.stack.remove_config("gcu-stack:blueprint")
        set_json_config(engine.stack, "spec", spec())
        engine.stack.set_config("gcu-stack:nightingaleDbPassword", auto.ConfigValue(PASSWORD, secret=True))
        yield engine.stack, engine.cluster, root


def test_nightingale_and_gcushare_come_up_and_go_away(stack):
    stack, cluster, root = stack
    up_converged(stack)
    out = outputs(stack)
    assert out["readyResource"] == "7/7" and out["phase"] == "Running", [(s["name"], s["status"]) for s in out["resourceStatuses"]]
    statuses = {s["name"]: s["status"] for s in out["resourceStatuses"]}
    assert statuses["nightingale"] == statuses["gcusharePlugin"] == statuses["gcushareScheduler"] == "Running"
    deployments = json.loads(cluster.kubectl("get", "deployments", "-n", "enflame", "-o", "json").stdout)["items"]
    assert {d["metadata"]["name"]: d["status"].get("readyReplicas") for d in deployments} == dict.fromkeys(
        ["agentd", "mysql", "nserver", "nwebapi", "prometheus", "redis"], 1
    )
    claim = json.loads(cluster.kubectl("get", "pvc", "mysql-pvc", "-n", "enflame", "-o", "json").stdout)
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == "mysql-pv"
    plugin = json.loads(cluster.kubectl("get", "daemonset", "gcushare-device-plugin", "-n", "kube-system", "-o", "json").stdout)
    assert plugin["status"]["numberReady"] == plugin["status"]["desiredNumberScheduled"] == 1  # gcushareNodes: one node
    assert out["gcushareSchedulerExtender"]["url"].endswith(":32766/gcushare-scheduler")
    # The password is a Kubernetes Secret and a Pulumi secret, never plain text in state.
    for resource in stack.export_stack().deployment["resources"]:
        assert PASSWORD not in json.dumps(resource), (resource["urn"], [k for k, v in {**resource.get("inputs", {}), **resource.get("outputs", {})}.items() if PASSWORD in json.dumps(v)])
    stack.destroy(on_output=lambda _: None)
    left = json.loads(cluster.kubectl("get", "deployments,services,pvc", "-n", "enflame", "-o", "json").stdout)["items"]
    assert left == []
    assert "mysql-pv" not in cluster.kubectl("get", "pv", "-o", "name", check=False).stdout
