"""The exporter (components/catalog/exporter.py)."""

import copy
import json

from harness import SEED_BLUEPRINT, run_program
from k8s_schema import normalise, validate_all
from realnode_fixtures import wait_until

from devtools import gobuild
from devtools.localcluster import LocalCluster

# Prometheus Operator's own CRDs, as published in its Go module.
OPERATOR_MODULE, OPERATOR_VERSION = "github.com/prometheus-operator/prometheus-operator", "v0.94.0"   # v0.95.x is not served here
SERVICE_MONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"


def test_exporter_serves_metrics_on_node_port_30940(seed_run):
    service = normalise(seed_run.one("Service", "enflame-gcu-exporter").inputs)
    assert service["spec"]["type"] == "NodePort"
    (port,) = service["spec"]["ports"]
    assert port["nodePort"] == 30940 and port["targetPort"] == "metrics"
    assert service["spec"]["selector"] == seed_run.one("DaemonSet", "enflame-gcu-exporter").inputs["spec"]["selector"]["matchLabels"]
    assert not [r for r in seed_run.k8s() if r.inputs["kind"] == "ServiceMonitor"]


def test_exporter_service_monitor_behind_a_switch():
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "exporterServiceMonitor": True})
    monitor = run.one("ServiceMonitor", "enflame-gcu-exporter")
    assert monitor.inputs["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor.inputs["spec"]["endpoints"][0]["path"] == "/metrics"
    validate_all(run)


def test_prometheus_operators_crd_accepts_the_service_monitor(tmp_path):
    """The ServiceMonitor as the stack declares it, checked by a real API server against Prometheus Operator's own
    CRD schema, unknown fields refused (what `kubectl apply` does by default)."""
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "exporterServiceMonitor": True})
    monitor = normalise(run.one("ServiceMonitor", "enflame-gcu-exporter").inputs)
    crd = gobuild.module_dir(OPERATOR_MODULE, OPERATOR_VERSION) / SERVICE_MONITOR_CRD
    with LocalCluster(tmp_path / "cluster", nodes=["node-1"], audit=False) as cluster:
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
        # (not `kubectl wait`: it fails at once while the new CRD has no status.conditions yet)
        wait_until(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in json.loads(
            cluster.kubectl("get", "crd", "servicemonitors.monitoring.coreos.com", "-o", "json").stdout
        ).get("status", {}).get("conditions") or []), 60, "the servicemonitors CRD Established")

        def apply(obj: dict):
            return cluster.kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-",
                                   input=json.dumps(obj), check=False)

        accepted = apply(monitor)
        assert accepted.returncode == 0, accepted.stderr
        # The same check refuses what Prometheus Operator would not read.
        broken = copy.deepcopy(monitor)
        broken["spec"]["endpoints"][0]["scrapeEvery"] = "30s"
        refused = apply(broken)
        assert refused.returncode != 0 and "scrapeEvery" in refused.stderr, refused
