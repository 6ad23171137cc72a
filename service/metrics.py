"""Prometheus metrics of the service (GET /metrics), on a registry of its own (one per app, so tests can make many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("gcu_stack_service_requests", "HTTP requests answered, by envelope operation and status",
                                ["operation", "status"], registry=self.registry)
        self.operations = Counter("gcu_stack_service_operations", "Operations finished, by kind and result",
                                  ["operation", "result"], registry=self.registry)
        self.duration = Histogram("gcu_stack_service_operation_seconds", "How long operations took, by kind",
                                  ["operation"], registry=self.registry,
                                  buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200))
        self.running = Gauge("gcu_stack_service_operations_running", "Operations running now", registry=self.registry)
        # From each finished operation's driverUpgrade.reports (the rollout's own per-node record).
        self.driver_node = Histogram("gcu_stack_service_driver_node_upgrade_seconds",
                                     "One node's driver upgrade, first state to last, by result", ["result"],
                                     registry=self.registry, buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600))
        self.evictions = Counter("gcu_stack_service_driver_evictions", "Pods evicted (or drained) by driver upgrades",
                                 registry=self.registry)

    def driver_reports(self, driver_upgrade: dict, rolled: list[str]) -> None:
        """The per-node reports of the rollouts an operation ran (`rolled`: DriverUpgrade resource names), from the
        `driverUpgrade` output: the component's own (`driver-upgrade`) and each pool's (`driver-upgrade-<pool>`)."""
        parts = [("driver-upgrade", driver_upgrade)] + [(f"driver-upgrade-{name}", pool) for name, pool in (driver_upgrade.get("pools") or {}).items()]
        for report in (r for name, part in parts if name in rolled for r in ((part or {}).get("reports") or {}).values()):
            self.driver_node.labels(report.get("result", "unknown")).observe(float(report.get("seconds") or 0))
            self.evictions.inc(len(report.get("evicted") or []))
