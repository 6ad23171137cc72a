"""The exporter (components/catalog/exporter.py)."""

from harness import SEED_BLUEPRINT, run_program
from k8s_schema import normalise, validate_all


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
