"""Nightingale end to end with the real engine on a real node: `pulumi up` of the seed blueprint with Nightingale
deployed, its six parts running and reaching each other through the stack's Services, cluster DNS, Secret, volume
and NodePort, and a destroy that leaves the database's data on the node and nothing else.

A real kubelet with its own containerd (devtools/realnode.py), kube-proxy and CoreDNS on it; the six parts
are the stand-ins of devtools/fakenightingale (they connect as the real ones are configured; see its main.go), the
rest of the seed the stand-ins of devtools/standin_node.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.request

import pytest
from engine import outputs, real_node_stack, up_converged
from pulumi import automation as auto
from realnode_fixtures import get, wait_until

from devtools import clusterdns, fakenightingale, standin_node

NODE = f"n9e-{os.getpid()}"
LABELS = {"enflame.com/gcu.driver.present": "true"}
NAMESPACE = "enflame"
PASSWORD = "n9e-db-Secret-only"
WEB_NODE_PORT = 30018


@pytest.fixture(scope="module")
def real(tmp_path_factory):   # real_node_stack takes the real-node lock itself
    root = tmp_path_factory.mktemp("engine-nightingale")
    volume = root / "volume" / "mysql"   # the kubelet creates the last part (DirectoryOrCreate)
    volume.parent.mkdir()
    spec = standin_node.blueprint(nightingale=True, nightingale_node=NODE, nightingale_volume=str(volume))["spec"]
    with real_node_stack(root, NODE, LABELS, spec, name="nightingale") as (cluster, node, stack, _):
        clusterdns.up(cluster.kubeconfig, [node], replicas=1)   # the parts find each other by their Service names
        stack.set_config("gcu-stack:nightingaleDbPassword", auto.ConfigValue(PASSWORD, secret=True))
        yield {"cluster": cluster, "node": node, "stack": stack, "volume": volume}


def _pods(cluster) -> list[dict]:
    return json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]


def _part_pod(cluster, part: str) -> dict:
    (pod,) = [p for p in _pods(cluster) if p["metadata"]["labels"].get("app.kubernetes.io/name") == part]
    return pod


def _web_status(node) -> dict:
    with urllib.request.urlopen(f"http://{node.node_ip}:{WEB_NODE_PORT}/api/status", timeout=5) as response:
        return json.loads(response.read())


def test_the_stand_ins_go_unit_tests_pass():
    assert "--- PASS: TestWebapiReportsEveryPartItReaches" in fakenightingale.go_test()


def test_1_up_runs_the_six_parts_on_the_node(real):
    cluster, node = real["cluster"], real["node"]
    up_converged(real["stack"])
    assert outputs(real["stack"])["phase"] == "Running"
    pods = _pods(cluster)
    assert sorted(p["metadata"]["labels"]["app.kubernetes.io/name"] for p in pods) == sorted(fakenightingale.PARTS)
    for pod in pods:
        assert pod["spec"]["nodeName"] == NODE and pod["status"]["phase"] == "Running", pod["status"]
    # The database's volume is the node's directory, handed to the database's non-root user before it starts: the
    # namespace admits that (a root init container) at Pod Security "baseline".
    assert get(cluster, "pv", "mysql-pv")["status"]["phase"] == "Bound"
    (owner,) = _part_pod(cluster, "mysql")["status"]["initContainerStatuses"]
    assert owner["state"]["terminated"]["exitCode"] == 0
    assert get(cluster, "namespace", NAMESPACE)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert (real["volume"] / fakenightingale.MYSQL_STATE_FILE).stat().st_uid == 1000
    # Prometheus writes where its flags say (an emptyDir), not into its image.
    assert "storage at /prometheus" in node.pod_log(NAMESPACE, _part_pod(cluster, "prometheus")["metadata"]["name"])


def test_2_the_parts_reach_each_other_and_the_web_ui_answers_on_its_node_port(real):
    cluster, node = real["cluster"], real["node"]
    # From the machine, as an operator's browser would: the web UI's NodePort on the node's address. nwebapi
    # answers with what it reaches at that moment, through the Service names every pod is given.
    status = wait_until(lambda: (lambda s: s if NODE in (s["nserver"].get("view") or {}).get("agents", {}) else None)(
        _web_status(node)), 90, f"the web UI on {node.node_ip}:{WEB_NODE_PORT} reporting agentd of {NODE}")
    assert status["mysql"] == "ok" and status["redis"] == "ok", status
    assert status["prometheus"]["ready"] == "ok" and status["prometheus"]["url"] == "http://prometheus:9090", status
    # Prometheus runs the configuration the stack renders: itself and the exporter.
    assert {"prometheus", "gcu-exporter"} <= set(status["prometheus"]["jobs"]), status
    assert status["nserver"]["status"] == "ok" and status["nserver"]["addr"] == "nserver:19000", status
    assert status["nserver"]["view"]["mysql"] == "ok" and status["nserver"]["view"]["redis"] == "ok", status
    mysql_log = node.pod_log(NAMESPACE, _part_pod(cluster, "mysql")["metadata"]["name"])
    assert "initializing database files in /var/lib/mysql" in mysql_log and "access denied" not in mysql_log, mysql_log
    for part in ("nserver", "nwebapi"):
        log = node.pod_log(NAMESPACE, _part_pod(cluster, part)["metadata"]["name"])
        assert "connected to the database at mysql:3306 and Redis at redis:6379" in log, log


def test_3_the_database_password_reaches_the_pods_only_from_the_secret(real):
    cluster = real["cluster"]
    workloads = cluster.kubectl("get", "deployments,pods", "-n", NAMESPACE, "-o", "json").stdout
    assert PASSWORD not in workloads
    for part, variable in (("mysql", "MYSQL_ROOT_PASSWORD"), ("nserver", "MYSQL_PASSWORD"), ("nwebapi", "MYSQL_PASSWORD")):
        env = {e["name"]: e for c in _part_pod(cluster, part)["spec"]["containers"] for e in c.get("env", [])}
        assert env[variable] == {"name": variable, "valueFrom": {"secretKeyRef": {"name": "nightingale-db", "key": "password"}}}
    # And it is the Secret's value the database took as its root password (the others logged in with it).
    state = json.loads((real["volume"] / fakenightingale.MYSQL_STATE_FILE).read_text())
    assert state["rootPasswordSha256"] == hashlib.sha256(PASSWORD.encode()).hexdigest()


def test_4_destroy_leaves_the_databases_data_and_nothing_else(real):
    cluster = real["cluster"]
    real["stack"].destroy(on_output=lambda _: None)
    left = cluster.kubectl("get", "pv,pvc,secrets,deployments,services,pods,configmaps", "-A", "-l",
                           "app.kubernetes.io/component=nightingale", "-o", "name").stdout.split()
    assert left == []
    wait_until(lambda: get(cluster, "namespace", NAMESPACE) is None, 120, f"namespace {NAMESPACE} gone")
    # The volume was Retain: its data stays on the node for the next install (docs/nightingale.md).
    state = json.loads((real["volume"] / fakenightingale.MYSQL_STATE_FILE).read_text())
    assert state["starts"] >= 1 and state["rootPasswordSha256"] == hashlib.sha256(PASSWORD.encode()).hexdigest()
