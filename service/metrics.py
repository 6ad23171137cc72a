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
